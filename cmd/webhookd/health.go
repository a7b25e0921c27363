package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCommand probes a readiness URL and exits 0 only on a 200. The
// container image has no shell or curl, so its HEALTHCHECK runs this.
func newHealthCommand() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the gateway (or any URL) answers 200, 1 otherwise",
		Example: `  webhookd health
  webhookd health --url http://127.0.0.1:8080/readyz --timeout 1s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(url)
			if err != nil {
				return fmt.Errorf("not healthy: %w", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("not healthy: %s answered %s", url, resp.Status)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/readyz", "URL that must answer 200")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
