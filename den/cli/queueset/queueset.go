package queueset

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Parse checks one setting given as text (key=value on the command line)
// with the decoder the nodes read it with, and adds it to s in the form den
// writes it. The value "none" (or an empty value) removes the key, except for the name
// and the plugin, which a queue must have.
func Parse(s *queue.QueueSettings, key, value string) error {
	key = strings.ToLower(strings.TrimSpace(key))
	if key == "plugin" {
		key = queue.SettingPlugin
	}
	if !slices.Contains(queue.QueueSettingKeys, key) {
		return fmt.Errorf("unknown queue setting %q (known: %s)", key, strings.Join(queue.QueueSettingKeys, ", "))
	}
	value = strings.TrimSpace(value)
	if value == "" || strings.EqualFold(value, "none") || strings.EqualFold(value, "null") {
		if key == queue.SettingName || key == queue.SettingPlugin {
			return fmt.Errorf("a queue must have a %s", key)
		}
		s.Unset = append(s.Unset, key)
		return nil
	}
	text := textValue(value)
	var v any
	switch key {
	case queue.SettingName:
		if err := queue.CheckQueueName(value); err != nil {
			return err
		}
		v = value
	case queue.SettingPlugin:
		v = value
	case queue.SettingMaxThreads, queue.SettingThreads:
		n, err := queue.DecodeCount(text)
		if err != nil || n > 1<<20 {
			return fmt.Errorf("%s %q: want a whole number from 0 to %d", key, value, 1<<20)
		}
		v = int32(n)
	case queue.SettingSort:
		lower := strings.ToLower(value)
		if lower != queue.SortFIFO && lower != queue.SortLIFO && lower != queue.SortDefault {
			return fmt.Errorf("sort %q: want fifo, lifo or default", value)
		}
		v = lower
	case queue.SettingGFS:
		mode, err := queue.NormalizeGFS(value)
		if err != nil {
			return fmt.Errorf("gfs: %w", err)
		}
		v = mode
	case queue.FieldTimeout, queue.FieldRetryDelay, queue.FieldMaxTermination, queue.FieldUsageInterval:
		d, err := queue.DecodeSeconds(text)
		if err != nil {
			return fmt.Errorf("%s %s", key, err)
		}
		v = seconds(d)
	case queue.FieldMaxRetries, queue.FieldMaxTimeouts:
		n, err := queue.DecodeCount(text)
		if err != nil || n > 1000 {
			return fmt.Errorf("%s %q: want a whole number from 0 to 1000", key, value)
		}
		v = int32(n)
	case queue.FieldMaxOutput:
		n, err := queue.DecodeCount(text)
		if err != nil || n == 0 {
			return fmt.Errorf("%s %q: want a positive number of bytes", key, value)
		}
		v = n
	case queue.FieldMaxProcesses:
		n, err := queue.DecodeCount(text)
		if err != nil || n == 0 || n > math.MaxInt32 {
			return fmt.Errorf("%s %q: want a positive number of processes", key, value)
		}
		v = n
	case queue.FieldMemoryRetryFactor:
		f, err := queue.DecodeMemoryRetryFactor(text)
		if err != nil {
			return fmt.Errorf("%s %s", key, err)
		}
		v = f
	case queue.FieldRateLimit:
		l, err := queue.ParseRateLimit(value)
		if err != nil {
			return err
		}
		v = l.Document()
	case queue.FieldRetention:
		return fmt.Errorf("retention is set key by key (retention.succeeded=7d, retention.action=archive, ...) or removed whole (retention=none)")
	default: // retention.*
		lower := strings.ToLower(value)
		if err := queue.DecodeRetentionSetting(strings.TrimPrefix(key, queue.FieldRetention+"."), textValue(lower)); err != nil {
			return err
		}
		v = lower // as given, lower case
	}
	s.Set = append(s.Set, bson.E{Key: key, Value: v})
	return nil
}

// textValue is s as the BSON string a writer would store.
func textValue(s string) bson.RawValue {
	_, raw, _ := bson.MarshalValue(s)
	return bson.RawValue{Type: bson.TypeString, Value: raw}
}

// seconds is d as a number of seconds: whole when it is.
func seconds(d time.Duration) any {
	if d%time.Second == 0 {
		return int64(d / time.Second)
	}
	return d.Seconds()
}
