package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCommand probes a readiness URL and exits 0 only on a 200. The
// container image has no shell or curl, so its HEALTHCHECK runs this.
func newHealthCommand() *cobra.Command {
	var url, caFile, serverName string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the gateway (or any URL) answers 200, 1 otherwise",
		Example: `  webhookd health
  webhookd health --url http://127.0.0.1:8080/readyz --timeout 1s
  webhookd health --url https://127.0.0.1:8443/readyz --ca-file /etc/webhookd/tls/tls.crt --server-name hooks.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: timeout}
			if caFile != "" || serverName != "" {
				tr, err := healthTLS(caFile, serverName)
				if err != nil {
					return err
				}
				client.Transport = tr
			}
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
	cmd.Flags().StringVar(&caFile, "ca-file", "", "PEM certificates to trust for an https URL instead of the system's roots: a CA, or the listener's own certificate file")
	cmd.Flags().StringVar(&serverName, "server-name", "", "name the certificate must be for, when the URL's host (127.0.0.1) is not among its names")
	return cmd
}

// healthTLS is a transport that verifies the listener's certificate
// against caFile and for serverName. Trusting the listener's own
// certificate file works too: a certificate in the pool needs no chain,
// so a probe inside the container can check the certificate it serves.
func healthTLS(caFile, serverName string) (*http.Transport, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file: %s holds no PEM certificate", caFile)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return tr, nil
}
