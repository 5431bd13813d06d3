package dentest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/sandbox"
)

// Environment variables the harness reads.
const (
	// EnvURI names a real MongoDB to test against instead of the embedded
	// server.
	EnvURI = "DEN_TEST_MONGODB_URI"
	// EnvRole makes a re-executed test binary run a role instead of tests.
	EnvRole = "DEN_TEST_ROLE"
	// EnvDenBinary names a prebuilt den binary for the embedded server,
	// saving a build per package.
	EnvDenBinary = "DEN_TEST_DEN_BINARY"
)

var (
	serverURI string
	client    *mongo.Client
	denBinary string
)

// Main runs a test package: a program in its sandbox when the command
// plugin re-executed the binary for one (den/sandbox), a role when the
// binary was re-executed with DEN_TEST_ROLE=<name>, else the tests, with a
// server. Call it from TestMain; it does not return.
func Main(m *testing.M, roles map[string]func() int) {
	// A program started by the command plugin from the test binary enters
	// its sandbox here, as in den's own main.
	sandbox.Main()
	if role := os.Getenv(EnvRole); role != "" {
		fn, ok := roles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "dentest: unknown role %q\n", role)
			os.Exit(2)
		}
		os.Exit(fn())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "dentest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dentest:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	serverURI = os.Getenv(EnvURI)
	if serverURI == "" {
		stop, err := startServer(tmp)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dentest: start the embedded server:", err)
			return 1
		}
		defer stop()
	}
	client, err = mongo.Connect(options.Client().ApplyURI(serverURI))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dentest: connect:", err)
		return 1
	}
	defer client.Disconnect(context.Background())
	// Marked from here on: every node and runner the tests start, not the
	// server above. Stopped before the server is (the defers run last
	// first).
	token := sweepToken()
	os.Setenv(EnvSweep, token)
	defer func() {
		if n := sweep(token, 10*time.Second); n > 0 {
			fmt.Fprintf(os.Stderr, "dentest: stopped %d processes the tests left running (task runners outlive their node by design)\n", n)
		}
	}()
	return m.Run()
}

// DenBinary returns the den binary the harness built (or was given), for
// tests that run den itself. It is empty when testing against
// DEN_TEST_MONGODB_URI without DEN_TEST_DEN_BINARY; BuildDen builds it then.
func DenBinary() string { return denBinary }

// BuildDen returns a den binary, building it (without -race) into dir if
// the harness has none yet. It is built as scripts/release.sh and the .deb
// build it, without cgo (CGO_ENABLED=0: a static binary, whose user
// lookups read /etc/passwd and /etc/group and whose Landlock calls go
// through Go's own all-threads syscall), so that the tests run what ships.
func BuildDen(dir string) (string, error) {
	if denBinary != "" {
		return denBinary, nil
	}
	if b := os.Getenv(EnvDenBinary); b != "" {
		denBinary = b
		return b, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(dir, "den")
	cmd := exec.Command(goTool, "build", "-o", out, "./cmd/den")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/den: %v\n%s", err, b)
	}
	denBinary = out
	return out, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// startServer starts the package's shared `den devdb` and returns a
// function that stops it.
func startServer(tmp string) (func(), error) {
	bin, err := BuildDen(tmp)
	if err != nil {
		return nil, err
	}
	p, err := startDevdb(bin, filepath.Join(tmp, "db"), "the embedded server", GiveUp())
	if err != nil {
		return nil, err
	}
	serverURI = p.uri
	return p.stop, nil
}

// EmbeddedServer reports whether the tests run against the embedded
// development server (FerretDB), not a MongoDB named by EnvURI.
func EmbeddedServer() bool { return os.Getenv(EnvURI) == "" }
