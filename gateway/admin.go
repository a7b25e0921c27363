package gateway

import (
	"crypto/subtle"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
)

// requireToken guards the admin API. With no token configured every call is
// refused: an admin API open by default would leak every receipt.
func (s *Server) requireToken(c *fiber.Ctx) error {
	if s.token == "" {
		return webhookd.Errorf(webhookd.EUNAUTHORIZED, "admin API disabled: set admin.token")
	}
	got, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
		return webhookd.Errorf(webhookd.EUNAUTHORIZED, "missing or wrong bearer token")
	}
	return c.Next()
}

// param returns a path parameter, percent-decoded: request IDs and resources
// may hold '/' and other reserved characters.
func param(c *fiber.Ctx, name string) (string, error) {
	v, err := url.PathUnescape(c.Params(name))
	if err != nil {
		return "", webhookd.FieldErrorf(name, "bad percent-encoding in %s", name)
	}
	return v, nil
}

// receiptView is a receipt as the admin API shows it: residual risk is
// derived from the decision and forward state, never stored.
type receiptView struct {
	*dedupe.Receipt
	ResidualRisk []string `json:"residual_risk"`
}

func (s *Server) handleGetReceipt(c *fiber.Ctx) error {
	source, err := param(c, "source")
	if err != nil {
		return err
	}
	requestID, err := param(c, "request_id")
	if err != nil {
		return err
	}
	r, err := s.records.Receipt(c.UserContext(), source, requestID)
	if err != nil {
		return err
	}
	return c.JSON(receiptView{Receipt: r, ResidualRisk: r.ResidualRisk()})
}

func (s *Server) handleGetResource(c *fiber.Ctx) error {
	source, err := param(c, "source")
	if err != nil {
		return err
	}
	resource, err := param(c, "resource")
	if err != nil {
		return err
	}
	l, err := s.records.Latest(c.UserContext(), source, resource)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"version": l.Version, "request_id": l.RequestID, "updated_at": l.UpdatedAt})
}
