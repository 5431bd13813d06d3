package config_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/den-project/den/den/config"
)

// Load reads den's YAML file (or a Disbatch config.json) over den's
// defaults; keys the file leaves out keep their defaults. A value outside
// its allowed range is refused with an error naming the file, the key,
// the value and what is allowed. The environment (DEN_NODE,
// DEN_MONGO_URI, ...) overrides the file, and flags, Load's second
// argument, override both.
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "den-config-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	good := filepath.Join(dir, "den.yaml")
	err = os.WriteFile(good, []byte(`
mongo:
  uri: mongodb://db.example:27017/
  database: jobs
node: worker-1
interval: 2s
gfs: true
runner:
  max_tasks: 10
`), 0o600)
	if err != nil {
		log.Fatal(err)
	}
	c, err := config.Load(good, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("uri:", c.MongoURI)
	fmt.Println("database:", c.Database)
	fmt.Println("node:", c.Name)
	fmt.Println("interval:", c.Interval)
	fmt.Println("gfs:", c.GFS)
	fmt.Println("runner.max_tasks:", c.Runner.MaxTasks)
	fmt.Println("runner.idle (default):", c.Runner.Idle)
	fmt.Println("orphan_age (default):", c.OrphanAge)

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("mongo:\n  uri: mongodb://db.example/\ninterval: 1ms\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	_, err = config.Load(bad, nil)
	fmt.Println(strings.ReplaceAll(err.Error(), dir, "DIR"))
	// Output:
	// uri: mongodb://db.example:27017/
	// database: jobs
	// node: worker-1
	// interval: 2s
	// gfs: true
	// runner.max_tasks: 10
	// runner.idle (default): 10s
	// orphan_age (default): 5m0s
	// configuration (file DIR/bad.yaml, environment, flags): interval: 1ms is below the minimum 100ms (allowed: 100ms to 30s)
}
