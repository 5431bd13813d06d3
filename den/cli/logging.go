package cli

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// newLogger returns a JSON logger (for systemd and log shippers) or a
// console one (for a terminal); format "auto" picks by whether stderr is a
// terminal.
func newLogger(level, format string) (*zap.Logger, bool, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, false, fmt.Errorf("log level: %w", err)
	}
	json := format == "json" || (format == "auto" && !isTerminal(os.Stderr))
	var cfg zap.Config
	if json {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "time"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	} else {
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
		cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	}
	cfg.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	cfg.DisableCaller = true
	cfg.Sampling = nil
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	log, err := cfg.Build()
	if err != nil {
		return nil, false, fmt.Errorf("build logger: %w", err)
	}
	return log, json, nil
}

// isTerminal reports whether f is a terminal (not merely a character
// device such as /dev/null).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
