package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// devCommandPrograms are the programs den dev --command allows: harmless
// ones, none of which starts another program or writes a file, so that a
// task can do no more than print and wait, with Landlock or without.
var devCommandPrograms = []string{"echo", "printf", "sleep", "true", "false", "date", "seq"}

// devCommandUser is the user den dev --command runs programs as, where den
// may change user.
const devCommandUser = "nobody"

// devCommandPolicy is the command plugin's policy den dev --command starts
// from policy (the configuration's, with its defaults): on, the
// devCommandPrograms found on this machine (in /usr/bin or /bin), no
// shell, as devCommandUser where den may change user and the user exists
// (else as den's own: user_optional), Landlock where the kernel has it
// (optional: the programs start no others).
func devCommandPolicy(policy command.Policy) command.Policy {
	policy.Enabled, policy.Shell = true, false
	policy.Allow = nil
	for _, name := range devCommandPrograms {
		for _, dir := range []string{"/usr/bin", "/bin"} {
			path := filepath.Join(dir, name)
			if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
				policy.Allow = append(policy.Allow, path)
				break
			}
		}
	}
	policy.User = ""
	if _, err := user.Lookup(devCommandUser); err == nil {
		policy.User = devCommandUser
	}
	policy.UserOptional, policy.Landlock = true, command.LandlockOptional
	return policy
}

// devCommand turns the command plugin on for den dev --command (unless
// the configuration has it on already: then its policy stands), creates
// a queue "command" when there is none, and prints a task to try.
func devCommand(ctx context.Context, cfg *config.Config, uri string) error {
	policy, ours := cfg.Command, !cfg.Command.Enabled
	if ours {
		policy = devCommandPolicy(cfg.Command)
		raw, err := json.Marshal(policy)
		if err != nil {
			return fmt.Errorf("command policy: %w", err)
		}
		cfg.Command = policy
		if cfg.PluginConfig == nil {
			cfg.PluginConfig = map[string]json.RawMessage{}
		}
		cfg.PluginConfig[config.CommandPlugin] = raw
	}
	if len(policy.Allow) == 0 {
		return fmt.Errorf("den dev --command: none of %s is in /usr/bin or /bin", strings.Join(devCommandPrograms, ", "))
	}
	who := "den's own user"
	if e, err := policy.Boundary(command.ThisMachine()); err != nil {
		return fmt.Errorf("den dev --command: %w", err)
	} else if e.User != nil {
		who = "user " + policy.User
	} else if ours && os.Geteuid() == 0 {
		// Never root's programs on a policy den dev made up.
		return fmt.Errorf("den dev --command: den runs as root and cannot run programs as user %s (no such user, or den lacks the capabilities to change user): run den dev as another user, or turn the plugin on in the configuration", devCommandUser)
	}
	qid, err := ensureCommandQueue(ctx, uri, cfg.Database)
	if err != nil {
		return err
	}
	fmt.Printf("den dev: the command plugin is on, queue \"command\" (%s): it runs %s as %s\n", qid, strings.Join(policy.Allow, ", "), who)
	if echo := exampleProgram(policy.Allow); echo != "" {
		fmt.Printf(`den dev: try it (den task add takes one JSON object of parameters a line):

  echo '{"command": ["%s", "hello from a command task"]}' | den task add command --mongo-uri '%s' --database %s

`, echo, uri, cfg.Database)
	}
	return nil
}

// exampleProgram is a program of allow for the task den dev --command
// prints: echo where allowed (a file, or in a directory), else the first
// file allowed; "" when there is none.
func exampleProgram(allow []string) string {
	first := ""
	for _, a := range allow {
		st, err := os.Stat(a)
		switch {
		case err != nil:
		case st.IsDir():
			if e := filepath.Join(a, "echo"); isFile(e) {
				return e
			}
		case filepath.Base(a) == "echo":
			return a
		case first == "":
			first = a
		}
	}
	return first
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// ensureCommandQueue returns the id of the queue "command", creating it
// for the command plugin when there is none.
func ensureCommandQueue(ctx context.Context, uri, database string) (string, error) {
	client, err := connect(uri, "den dev")
	if err != nil {
		return "", err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store := queue.NewStore(client.Database(database))
	if q, _, err := store.FindQueue(cctx, "command"); err == nil {
		return q.ID.Hex(), nil
	}
	oid, err := store.CreateQueue(cctx, "command", command.Name, 2, queue.SortFIFO)
	if err != nil {
		return "", fmt.Errorf("dev database: %w", err)
	}
	return oid.Hex(), nil
}
