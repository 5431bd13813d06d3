package queue

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file holds the one decoder of each kind of value den reads from the
// documents users, shells, drivers and Perl nodes write. Each accepts what
// real writers write and refuses the rest with a reason a user can act on:
// every caller either uses the value or reports the reason, never ignores
// it.

// absent reports whether a field is missing or null: not set.
func absent(v bson.RawValue) bool { return v.Type == 0 || v.Type == bson.TypeNull }

// DecodeSeconds reads a non-negative duration given in seconds: a number
// (the shell writes doubles), a numeric string ("30"), or a Go duration
// string ("90s", "5m").
func DecodeSeconds(v bson.RawValue) (time.Duration, error) {
	f, ok := v.AsFloat64OK()
	if !ok {
		s, isStr := v.StringValueOK()
		if !isStr {
			return 0, fmt.Errorf("is %s; want a number of seconds", describe(v))
		}
		s = strings.TrimSpace(s)
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			return d, nil
		}
		var err error
		if f, err = strconv.ParseFloat(s, 64); err != nil {
			return 0, fmt.Errorf("is %s; want a number of seconds or a duration such as \"90s\"", describe(v))
		}
	}
	if f < 0 || math.IsNaN(f) || f > 1e9 {
		return 0, fmt.Errorf("is %s; want a number of seconds from 0 to 1e9", describe(v))
	}
	return time.Duration(f * float64(time.Second)), nil
}

// DecodeCount reads a non-negative whole number: int32, int64, a double
// without a fraction, or such a number written as a string.
func DecodeCount(v bson.RawValue) (int64, error) {
	n, ok := intValue(v)
	if !ok {
		if s, isStr := v.StringValueOK(); isStr {
			var err error
			if n, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				ok = true
			}
		}
	}
	if !ok || n < 0 {
		return 0, fmt.Errorf("is %s; want a whole number, 0 or more", describe(v))
	}
	return n, nil
}

// DecodeBool reads a flag: a boolean, 0 or 1, or the strings true/false,
// yes/no, on/off, 1/0 in any case.
func DecodeBool(v bson.RawValue) (bool, error) {
	switch v.Type {
	case bson.TypeBoolean:
		return v.Boolean(), nil
	case bson.TypeString:
		switch strings.ToLower(strings.TrimSpace(v.StringValue())) {
		case "true", "yes", "on", "1":
			return true, nil
		case "false", "no", "off", "0":
			return false, nil
		}
	default:
		if n, ok := intValue(v); ok && (n == 0 || n == 1) {
			return n == 1, nil
		}
	}
	return false, fmt.Errorf("is %s; want true or false", describe(v))
}

// timeLayouts are the string forms of a time a user may write.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"}

// DecodeTime reads a point in time: an ISODate, a number of seconds since
// the epoch (what Perl writers store), or a string in RFC 3339 form
// ("2026-11-23T10:00:00Z"; without a zone it is UTC).
func DecodeTime(v bson.RawValue) (time.Time, error) {
	switch v.Type {
	case bson.TypeDateTime, bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		if t, ok := timeValue(v); ok {
			if v.Type == bson.TypeDouble && (math.IsNaN(v.Double()) || math.IsInf(v.Double(), 0) || math.Abs(v.Double()) > 1e11) {
				break
			}
			return t, nil
		}
	case bson.TypeString:
		s := strings.TrimSpace(v.StringValue())
		for _, layout := range timeLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC(), nil
			}
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && math.Abs(f) < 1e11 {
			sec, frac := math.Modf(f)
			return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("is %s; want an ISODate, epoch seconds, or a string such as \"2026-11-23T10:00:00Z\"", describe(v))
}

// Control holds den's optional per-task settings as one document (a task,
// or its queue) gives them; a nil field is not set there.
type Control struct {
	Timeout        *time.Duration
	MaxRetries     *int
	RetryDelay     *time.Duration
	MaxTermination *time.Duration
	MaxOutput      *int64
	MaxProcesses   *int64
	MaxTimeouts    *int
	UsageInterval  *time.Duration
	// Requested is requested_resources (Resources).
	Requested *Resources
	// MemoryRetryFactor is memory_retry_factor (DecodeMemoryRetryFactor).
	MemoryRetryFactor *float64
}

// controlFields are the fields DecodeControl reads.
var controlFields = []string{
	FieldTimeout, FieldRetryDelay, FieldMaxTermination, FieldUsageInterval, FieldMaxRetries,
	FieldMaxOutput, FieldMaxProcesses, FieldRequested, FieldMaxTimeouts, FieldMemoryRetryFactor,
}

// DecodeControl reads the control settings of a task or queue document
// (controlFields).
// Each field that is set but cannot be read is one problem, "field: why".
func DecodeControl(doc bson.Raw) (Control, []string) {
	var c Control
	var problems []string
	dur := func(field string) *time.Duration {
		v := doc.Lookup(field)
		if absent(v) {
			return nil
		}
		d, err := DecodeSeconds(v)
		if err != nil {
			problems = append(problems, field+" "+err.Error())
			return nil
		}
		return &d
	}
	count := func(field string, most int64) *int64 {
		v := doc.Lookup(field)
		if absent(v) {
			return nil
		}
		n, err := DecodeCount(v)
		if err != nil {
			problems = append(problems, field+" "+err.Error())
			return nil
		}
		n = min(n, most)
		return &n
	}
	c.Timeout = dur(FieldTimeout)
	c.RetryDelay = dur(FieldRetryDelay)
	c.MaxTermination = dur(FieldMaxTermination)
	c.UsageInterval = dur(FieldUsageInterval)
	if n := count(FieldMaxRetries, 1000); n != nil {
		r := int(*n)
		c.MaxRetries = &r
	}
	c.MaxOutput = count(FieldMaxOutput, math.MaxInt64)
	c.MaxProcesses = count(FieldMaxProcesses, math.MaxInt32)
	if v := doc.Lookup(FieldRequested); !absent(v) {
		r, err := DecodeResources(v)
		if err != nil {
			problems = append(problems, FieldRequested+" "+err.Error())
		} else {
			c.Requested = r
		}
	}
	if n := count(FieldMaxTimeouts, 1000); n != nil {
		r := int(*n)
		c.MaxTimeouts = &r
	}
	if v := doc.Lookup(FieldMemoryRetryFactor); !absent(v) {
		f, err := DecodeMemoryRetryFactor(v)
		if err != nil {
			problems = append(problems, FieldMemoryRetryFactor+" "+err.Error())
		} else {
			c.MemoryRetryFactor = &f
		}
	}
	return c, problems
}
