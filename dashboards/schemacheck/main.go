// Command schemacheck decodes Grafana dashboard JSON files strictly against
// the dashboard schema that Grafana publishes through its foundation SDK
// (types generated from the dashboard kind), so that a field the schema
// does not know, or a value of the wrong type, fails the build instead of
// being dropped silently when Grafana loads the provisioned file.
//
// Usage: go run . FILE...
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func check(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d dashboard.Dashboard
	if err := d.UnmarshalJSONStrict(raw); failed(err) {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := d.Validate(); failed(err) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// failed reports whether err holds an error: the SDK returns its error
// list as a typed nil (an empty cog.BuildErrors) when there is none.
func failed(err error) bool {
	var list cog.BuildErrors
	if errors.As(err, &list) {
		return len(list) > 0
	}
	return err != nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: schemacheck FILE...")
		os.Exit(2)
	}
	// Panels and queries decode through the variants of their plugin
	// (timeseries, stat, prometheus, influxdb, ...): without these an
	// unknown panel body would pass unchecked.
	plugins.RegisterDefaultPlugins()
	var errs []error
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Printf("%s: valid\n", path)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
