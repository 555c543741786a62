package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers col on reg and returns it, or returns the collector
// registered there before under its name in its place (tests run several
// of a process's parts beside each other).
func Register[C prometheus.Collector](reg prometheus.Registerer, col C) (C, error) {
	err := reg.Register(col)
	var are prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &are):
		existing, ok := are.ExistingCollector.(C)
		if !ok {
			return col, fmt.Errorf("register metrics: %T registered under the name of a %T", are.ExistingCollector, col)
		}
		return existing, nil
	case err != nil:
		return col, fmt.Errorf("register metrics: %w", err)
	}
	return col, nil
}
