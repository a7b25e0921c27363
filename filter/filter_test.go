package filter_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/filter"
)

// invoice is a Stripe-like event of about 2 KB, the size of a typical one.
const invoice = `{
  "id": "evt_1PQx8sLkdIwHu7ix0XnWcFaf",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1718000000,
  "livemode": false,
  "pending_webhooks": 2,
  "request": {"id": "req_8f2kJd93kdLs0a", "idempotency_key": "b7c1e2a4-5d6f-4a8b-9c0d-1e2f3a4b5c6d"},
  "type": "invoice.paid",
  "account": "acct_1Kx2y3z4",
  "amount": 150,
  "ratio": 0.25,
  "huge": 123456789012345678901234567890,
  "tags": ["vip", "eu"],
  "items": [{"sku": "basic", "qty": 1}, {"sku": "x", "qty": 3}],
  "data": {
    "object": {
      "id": "in_1PQx8rLkdIwHu7ixGkz2Lh1P",
      "object": "invoice",
      "account_country": "DE",
      "account_name": "Example GmbH",
      "amount_due": 4900,
      "amount_paid": 4900,
      "amount_remaining": 0,
      "attempt_count": 1,
      "attempted": true,
      "billing_reason": "subscription_cycle",
      "collection_method": "charge_automatically",
      "currency": "eur",
      "customer": "cus_Q8hJk2Lm3Nn4Op",
      "customer_email": "billing@example.com",
      "customer_name": "Example GmbH",
      "discount": null,
      "hosted_invoice_url": "https://invoice.stripe.com/i/acct_1Kx2y3z4/test_YWNjdF8xS3gyeTN6NCxfUThoSms",
      "invoice_pdf": "https://pay.stripe.com/invoice/acct_1Kx2y3z4/test_YWNjdF8xS3gyeTN6NCxfUThoSms/pdf",
      "lines": {
        "object": "list",
        "data": [
          {
            "id": "il_1PQx8rLkdIwHu7ixq2Zr0XyA",
            "object": "line_item",
            "amount": 4900,
            "currency": "eur",
            "description": "1 × Pro plan (at €49.00 / month)",
            "period": {"end": 1720592000, "start": 1718000000},
            "price": {"id": "price_1OabCdLkdIwHu7ixEfGh", "unit_amount": 4900, "recurring": {"interval": "month", "interval_count": 1}},
            "quantity": 1,
            "type": "subscription"
          }
        ],
        "has_more": false,
        "total_count": 1,
        "url": "/v1/invoices/in_1PQx8rLkdIwHu7ixGkz2Lh1P/lines"
      },
      "metadata": {"tenant": "t_42", "plan": "pro"},
      "number": "EXAMPLE-0042",
      "paid": true,
      "period_end": 1718000000,
      "period_start": 1715408000,
      "status": "paid",
      "subscription": "sub_1OabCdLkdIwHu7ixIjKl",
      "subtotal": 4900,
      "tax": 0,
      "total": 4900
    }
  }
}`

func input(body string) *filter.Input {
	h := http.Header{
		"Stripe-Signature": {"t=1718000000,v1=abc"},
		"X-Tenant":         {"t_42", "t_43"},
	}
	return &filter.Input{
		Body: []byte(body),
		Header: func(name string) (string, bool) {
			v, ok := h[http.CanonicalHeaderKey(name)]
			return strings.Join(v, ", "), ok
		},
		RequestID: "evt_1PQx8sLkdIwHu7ix0XnWcFaf",
		Resource:  "in_1PQx8rLkdIwHu7ixGkz2Lh1P",
		Version:   "1718000000",
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		expr  string
		body  string // invoice unless set
		match bool
		err   string // of Eval, when evaluation fails
	}{
		{expr: `body.type.startsWith("invoice.")`, match: true},
		{expr: `body.type.startsWith("charge.")`, match: false},
		{expr: `body.type == "invoice.paid" && body.livemode == false`, match: true},
		{expr: `body.data.object.customer == "cus_Q8hJk2Lm3Nn4Op"`, match: true},
		{expr: `body.data.object.metadata.tenant in ["t_41", "t_42"]`, match: true},
		{expr: `body.data.object.discount == null`, match: true},
		{expr: `body.data.object.lines.data[0].price.recurring.interval == "month"`, match: true},

		// A field the body lacks.
		{expr: `body.data.object.refund == "re_1"`, err: "no such key: refund"},
		{expr: `body.nothing.deeper == 1`, err: "no such key: nothing"},
		{expr: `!(body.data.object.refund == "re_1")`, err: "no such key: refund"},
		{expr: `body.items[5].sku == "x"`, err: "index out of bounds: 5"},
		{expr: `has(body.account) && body.account == "acct_1Kx2y3z4"`, match: true},
		{expr: `has(body.account) && body.account == "acct_other"`, match: false},
		{expr: `has(body.data.object.customer)`, match: true},
		{expr: `has(body.data.object.refund)`, match: false},
		{expr: `!has(body.data.object.refund)`, match: true},
		{expr: `has(body.data.object.discount)`, match: true}, // present, though null
		{expr: `has(body.missing) && has(body.missing.deeper)`, match: false},
		{expr: `has(body.missing.deeper)`, err: "no such key: missing"},
		{expr: `has(body.account) && body.account == "acct_1"`, body: `{"type": "invoice.paid"}`, match: false},
		{expr: `"account" in body && "refund" in body.data.object == false`, match: true},

		// Headers, by lower-case name or any case, several values joined.
		{expr: `headers["stripe-signature"].startsWith("t=")`, match: true},
		{expr: `headers["Stripe-Signature"].startsWith("t=")`, match: true},
		{expr: `headers["x-tenant"] == "t_42, t_43"`, match: true},
		{expr: `"x-tenant" in headers`, match: true},
		{expr: `"x-other" in headers`, match: false},
		{expr: `has(headers.absent)`, match: false},
		{expr: `headers["x-other"] == "1"`, err: "no such header"},
		{expr: `size(headers) > 0`, err: "no such overload: size"},
		{expr: `headers.exists(h, h == "x-tenant")`, err: "expected iterable type"},
		{expr: `headers == {"x-tenant": "t_42, t_43"}`, err: "not listed"},

		// The source's fields.
		{expr: `request_id.startsWith("evt_") && resource.startsWith("in_") && int(version) > 1700000000`, match: true},

		// Numbers: ints as written, doubles otherwise, compared across.
		{expr: `body.amount > 100`, match: true},
		{expr: `body.amount > 100.5`, match: true},
		{expr: `body.amount == 150`, match: true},
		{expr: `body.amount == 150.0`, match: true},
		{expr: `body.amount / 100 == 1`, match: true},
		{expr: `body.ratio < 1`, match: true},
		{expr: `body.ratio * 4.0 == 1.0`, match: true},
		{expr: `body.huge > 1e29`, match: true},
		{expr: `body.amount > 200`, match: false},
		{expr: `body.type > 100`, err: "no such overload"},

		// Lists.
		{expr: `body.items.exists(i, i.sku == "x")`, match: true},
		{expr: `body.items.exists(i, i.sku == "y")`, match: false},
		{expr: `body.items.all(i, i.qty >= 1)`, match: true},
		{expr: `size(body.items) == 2 && body.items[1].qty == 3`, match: true},
		{expr: `"vip" in body.tags`, match: true},
		{expr: `body.tags == ["vip", "eu"]`, match: true},
		{expr: `body.tags + ["x"] == ["vip", "eu", "x"]`, match: true},
		{expr: `body.items[0] == {"sku": "basic", "qty": 1}`, match: true},
		{expr: `body.data.object.metadata.exists(k, k == "plan")`, match: true},
		{expr: `size(body.data.object.metadata) == 2`, match: true},

		// Bodies that are not an object, or not JSON.
		{expr: `body.type == "x"`, body: `not json`, err: "not JSON"},
		{expr: `body.type == "x"`, body: `{"type": "x"`, err: "not JSON"},
		{expr: `body.type == "x"`, body: ``, err: "not JSON"},
		{expr: `body.type == "x"`, body: `[1, 2]`, err: "unsupported index type 'string' in list"},
		{expr: `body == 42`, body: `42`, match: true},
		{expr: `headers["x-tenant"] != ""`, body: `not json`, match: true}, // the body is not read

		// JSON as it may be written: escapes, spaces, repeated keys (the
		// first counts), nesting, objects of many members.
		{expr: `body["ty\"pe"] == "a\"b" && body.name == "Zoë" && body.path == "a/b"`, body: `{"ty\"pe": "a\"b", "name": "Zo\u00eb", "path": "a\/b"}`, match: true},
		{expr: `body.a.b[1][0] == true && body.a.c == null`, body: " \n\t{ \"a\" : { \"b\" : [ [false] , [ true ] ] , \"c\" : null } } \n", match: true},
		{expr: `body.k == 1 && size(body) == 1`, body: `{"k": 1, "k": 2}`, match: true},
		{expr: `body.m39 == 39 && body.m0 == 0 && body.m39 == 39 && !has(body.m40)`, body: many(40), match: true},
		{expr: `body.x == "y"`, body: `{"x": "[{\"}]", "y": 1}`, match: false},
		{expr: `body.y == 1`, body: `{"x": "[{\"}]", "y": 1}`, match: true},

		// A dyn value that is not a bool.
		{expr: `body.type`, err: "not a bool"},
		{expr: `body.livemode`, match: false},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			f, err := filter.Compile(tc.expr)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			body := tc.body
			if body == "" && !strings.Contains(tc.err, "JSON") {
				body = invoice
			}
			got, err := f.Match(input(body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Eval = %v, %v; want an error containing %q", got, err, tc.err)
				}
			} else if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if got != tc.match {
				t.Errorf("Eval = %v, want %v", got, tc.match)
			}
			if m, _ := f.Match(input(body)); m != tc.match {
				t.Errorf("Match = %v, want %v", m, tc.match)
			}
		})
	}
}

// many returns an object of n members, m0: 0 to m<n-1>: n-1.
func many(n int) string {
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf(`"m%d": %d`, i, i)
	}
	return "{" + strings.Join(members, ", ") + "}"
}

// TestValidJSON: a caller that has found the body to be JSON spares the
// filter the check, with the same results.
func TestValidJSON(t *testing.T) {
	f, err := filter.Compile(`body.data.object.lines.data.exists(l, l.price.recurring.interval == "month")`)
	if err != nil {
		t.Fatal(err)
	}
	in := input(invoice)
	in.ValidJSON = true
	if ok, err := f.Match(in); !ok || err != nil {
		t.Fatalf("Eval = %v, %v; want true", ok, err)
	}
}

func TestNilFilterSelectsEverything(t *testing.T) {
	var none *filter.Filter
	if ok, err := none.Match(input("not json")); !ok || err != nil || !matches(none, input("")) {
		t.Errorf("a nil filter: Eval = %v, %v; want every delivery selected", ok, err)
	}
}

func TestMatchWithoutHeaders(t *testing.T) {
	f, err := filter.Compile(`"x-tenant" in headers`)
	if err != nil {
		t.Fatal(err)
	}
	if matches(f, &filter.Input{Body: []byte(`{}`)}) {
		t.Error("matched a delivery without headers")
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string
	}{
		{`body.type.startsWith("invoice."`, "at 1:32"},
		{`body.type == "a" &&`, "at 1:20"},
		{`body.type.startsWith("x") && bdoy.id == "1"`, "undeclared reference to 'bdoy' at 1:30"},
		{"body.type == \"a\"\n  && reqest_id == \"b\"", "undeclared reference to 'reqest_id' at 2:6"},
		{`request_id > 5`, "found no matching overload for '_>_' applied to '(string, int)' at 1:12"},
		{`headers["x-a"] + 1 == 2`, "at 1:16"},
		{`body.type.startsWith(1)`, "found no matching overload for 'startsWith' applied to 'dyn.(int)' at 1:21"},
		{`request_id`, "must be a condition (a bool), not a string"},
		{`body.id.matches("[")`, "missing closing ]"},
		{``, "at 1:1"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			f, err := filter.Compile(tc.expr)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want an error", tc.expr, f)
			}
			var ferr *filter.Error
			if !errors.As(err, &ferr) {
				t.Fatalf("Compile error is a %T, not a *filter.Error: %v", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Compile error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCostLimit: an expression whose work grows with the square of the
// body stops at the bound instead of running on.
func TestCostLimit(t *testing.T) {
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf(`{"sku": "s%d"}`, i)
	}
	body := `{"items": [` + strings.Join(items, ",") + `]}`
	runaway, err := filter.Compile(`body.items.all(i, body.items.exists(j, j.sku == i.sku))`)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := runaway.Match(input(body))
	if ok || err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Fatalf("Eval = %v, %v; want false and the cost limit exceeded", ok, err)
	}
	// One pass over the same list is well within it.
	linear, err := filter.Compile(`body.items.exists(i, i.sku == "s999")`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := linear.Match(input(body)); !ok || err != nil {
		t.Fatalf("Eval = %v, %v; want true", ok, err)
	}
}

func TestConcurrentMatch(t *testing.T) {
	f, err := filter.Compile(`body.type.startsWith("invoice.") && headers["x-tenant"] != ""`)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	for range 4 {
		go func() {
			ok := true
			for range 200 {
				ok = ok && matches(f, input(invoice))
			}
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Error("a concurrent Match did not match")
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	f, err := filter.Compile(`body.type.startsWith("invoice.")`)
	if err != nil {
		b.Fatal(err)
	}
	in := input(invoice)
	b.SetBytes(int64(len(invoice)))
	b.ReportAllocs()
	for b.Loop() {
		if !matches(f, in) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkMatchValidJSON(b *testing.B) {
	f, err := filter.Compile(`body.type.startsWith("invoice.")`)
	if err != nil {
		b.Fatal(err)
	}
	in := input(invoice)
	in.ValidJSON = true
	b.SetBytes(int64(len(invoice)))
	b.ReportAllocs()
	for b.Loop() {
		if !matches(f, in) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := filter.Compile(`has(body.account) && body.account == "acct_1"`); err != nil {
			b.Fatal(err)
		}
	}
}

// matches is Match's verdict alone.
func matches(f *filter.Filter, in *filter.Input) bool {
	ok, _ := f.Match(in)
	return ok
}
