package cli

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/human"
)

// The log encoders den uses: zap's, with what a terminal would act on
// escaped in every entry (queue and plugin names from the database are
// logged). zap escapes control characters below U+0020 in field values
// but leaves DEL, C1 and bidirectional formatting characters raw, and the
// console encoder prints the message as it is.
const (
	jsonEncoding    = "den-json"
	consoleEncoding = "den-console"
)

func init() {
	register := func(name string, inner func(zapcore.EncoderConfig) zapcore.Encoder, escape func([]byte) []byte) {
		err := zap.RegisterEncoder(name, func(c zapcore.EncoderConfig) (zapcore.Encoder, error) {
			return escapingEncoder{inner(c), escape}, nil
		})
		if err != nil {
			panic(err) // registered twice: a programming error
		}
	}
	register(jsonEncoding, zapcore.NewJSONEncoder, human.EscapeJSON)
	register(consoleEncoding, zapcore.NewConsoleEncoder, func(b []byte) []byte { return []byte(human.EscapeText(string(b))) })
}

// escapingEncoder is a zap encoder whose entries are passed through
// escape before they are written.
type escapingEncoder struct {
	zapcore.Encoder
	escape func([]byte) []byte
}

func (e escapingEncoder) Clone() zapcore.Encoder {
	return escapingEncoder{e.Encoder.Clone(), e.escape}
}

func (e escapingEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	buf, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil {
		return nil, err
	}
	if out := e.escape(buf.Bytes()); string(out) != string(buf.Bytes()) {
		buf.Reset()
		buf.Write(out)
	}
	return buf, nil
}

// newLogger returns a JSON logger (for systemd and log shippers) or a
// console one (for a terminal); format "auto" picks by whether stderr is a
// terminal. Either escapes what a terminal would act on (escapingEncoder).
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
		cfg.Encoding = jsonEncoding
	} else {
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
		cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		cfg.Encoding = consoleEncoding
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
