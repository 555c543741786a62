package main

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// The duration flags of baton run and baton elect, which take a number of
// seconds as the API does, and --wait's forever.

// waitForever is --wait forever.
const waitForever = time.Duration(math.MaxInt64)

// waitValue is --wait: a duration, or forever.
type waitValue time.Duration

func (w *waitValue) String() string {
	switch time.Duration(*w) {
	case waitForever:
		return "forever"
	case 0:
		return "0" // no default shown in help
	}
	return time.Duration(*w).String()
}

func (w *waitValue) Set(s string) error {
	if s == "forever" {
		*w = waitValue(waitForever)
		return nil
	}
	d, err := parseSeconds(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (like 30s, 1h, or 30 for seconds) or forever", s)
	}
	*w = waitValue(d)
	return nil
}

// secondsValue is a duration flag that, as the API does, also takes a
// number of seconds: --ttl 90 is --ttl 90s.
type secondsValue time.Duration

// String is the value as help shows it: "0" when unset, so that pflag
// shows no default for it.
func (v *secondsValue) String() string {
	if *v == 0 {
		return "0"
	}
	return time.Duration(*v).String()
}

func (v *secondsValue) Set(s string) error {
	d, err := parseSeconds(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (like 30s, 1h, or 30 for seconds)", s)
	}
	*v = secondsValue(d)
	return nil
}

func (v *secondsValue) Type() string { return "duration" }

// parseSeconds reads a Go duration ("1m30s") or a number of seconds ("90",
// "0.5").
func parseSeconds(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	// 2^63 ns is the first duration out of range; a float64 holds it
	// exactly, so the comparison is exact.
	if err != nil || math.IsNaN(f) || math.Abs(math.Round(f*float64(time.Second))) >= 0x1p63 {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

func (w *waitValue) Type() string { return "duration" }
