package gateway

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/webhookd/webhookd"
)

// FuzzAnswer checks the hand-written answer against an encoding/json
// Encoder, which writes what every other JSON answer is: the value and a
// newline.
func FuzzAnswer(f *testing.F) {
	f.Add("accepted", "billing", "req-1", "dlv-1", "sub_1", "10", "10", uint8(0))
	f.Add("stale", "a<b>&c", "é\u2028\"\\", "\x00\xff", "", "", "", uint8(0b1111))
	f.Fuzz(func(t *testing.T, decision, source, requestID, deliveryID, resource, version, latest string, nulls uint8) {
		nullable := func(bit uint8, s string) *string {
			if nulls&bit != 0 {
				return nil
			}
			return &s
		}
		a := answer{
			Decision:      webhookd.Decision(decision),
			Source:        source,
			RequestID:     requestID,
			DeliveryID:    nullable(1, deliveryID),
			Resource:      nullable(2, resource),
			Version:       nullable(4, version),
			LatestVersion: nullable(8, latest),
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(a); err != nil {
			t.Fatal(err)
		}
		if got := a.appendJSON(nil); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("appendJSON:\n got %s\nwant %s", got, want.Bytes())
		}
	})
}
