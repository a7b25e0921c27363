// Package configs owns webhookd's configuration: its defaults, the example
// file configs/webhookd.yaml (embedded in the binary, so a fresh checkout
// runs without one), loading with ${NAME} expansion from the environment,
// and validation that names the field and the rule it breaks.
package configs
