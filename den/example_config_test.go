package den_test

import (
	"fmt"
	"time"

	"github.com/den-project/den/den"
)

// A zero field of Config is its default: WithDefaults, which New calls for
// every node (den run's and an embedded one), fills them and keeps what
// was given.
func ExampleConfig_WithDefaults() {
	cfg := den.Config{Name: "worker-1", Interval: 2 * time.Second}.WithDefaults()
	fmt.Println("interval:", cfg.Interval)
	fmt.Println("orphan age:", cfg.OrphanAge)
	fmt.Println("runner max tasks:", cfg.Runner.MaxTasks)
	fmt.Println("sweeps every:", cfg.SweepEvery)
	// Output:
	// interval: 2s
	// orphan age: 5m0s
	// runner max tasks: 100
	// sweeps every: 15s
}

// Settings are the keys of den's configuration that set a duration or a
// number of Config, each with its field, its default and the range den's
// configuration accepts from an operator.
func ExampleSettings() {
	for _, s := range den.Settings()[:3] {
		fmt.Printf("%s sets %s: default %v, %v to %v\n", s.Key, s.Field,
			time.Duration(s.Default), time.Duration(s.Min), time.Duration(s.Max))
	}
	// Output:
	// interval sets Interval: default 1s, 100ms to 30s
	// orphan_age sets OrphanAge: default 5m0s, 30s to 24h0m0s
	// max_termination_time sets MaxTermination: default 10s, 1s to 1h0m0s
}
