package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/internal/timerslack"
)

// `den run` runs its node with den's timer slack (having executed itself
// again, once, keeping its pid) and recorded the slack it was started
// with for the tasks' programs; and with one P unless GOMAXPROCS is set.
func TestRunTimerSlackAndOneP(t *testing.T) {
	t.Parallel()
	own, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(own) >= timerslack.Slack {
		t.Skipf("this test runs with a timer slack of %d ns already: den run would keep it", own)
	}
	for _, tc := range []struct {
		env  []string
		want int
	}{{nil, 1}, {[]string{"GOMAXPROCS=3"}, 3}} {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			t.Parallel()
			bin, err := dentest.BuildDen(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "run", "--mongo-uri", dentest.URI(), "--database", fmt.Sprintf("slack%d", tc.want), "--node", "slack", "--log-format", "json")
			cmd.Env = append(append(os.Environ(), "HOME="+t.TempDir()), tc.env...)
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			var started struct {
				GOMAXPROCS int `json:"gomaxprocs"`
			}
			dentest.Eventually(t, 2*time.Minute, "the node starting", func() bool {
				for _, line := range strings.Split(stderr.String(), "\n") {
					if strings.Contains(line, `"node starting"`) {
						return json.Unmarshal([]byte(line), &started) == nil
					}
				}
				return false
			})
			if started.GOMAXPROCS != tc.want {
				t.Errorf("the node runs with GOMAXPROCS %d, want %d:\n%s", started.GOMAXPROCS, tc.want, stderr)
			}
			pid := strconv.Itoa(cmd.Process.Pid) // the same process after its execve
			slack, err := os.ReadFile("/proc/" + pid + "/timerslack_ns")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(slack)); got != strconv.FormatInt(timerslack.Slack.Nanoseconds(), 10) {
				t.Errorf("the node's timer slack is %s ns, want %d", got, timerslack.Slack.Nanoseconds())
			}
			env, err := os.ReadFile("/proc/" + pid + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			if want := timerslack.EnvOriginal + "=" + strconv.Itoa(own); !strings.Contains("\x00"+string(env)+"\x00", "\x00"+want+"\x00") {
				t.Errorf("the node's environment lacks %s", want)
			}
			// Still den, to ps and systemctl status.
			if comm, err := os.ReadFile("/proc/" + pid + "/comm"); err != nil || strings.TrimSpace(string(comm)) != filepath.Base(bin) {
				t.Errorf("the node's process name is %q (%v), want %q", comm, err, filepath.Base(bin))
			}
			if strings.Contains(stderr.String(), "timer slack") {
				t.Errorf("the node warned about its timer slack:\n%s", stderr)
			}
		})
	}
}
