package config

import (
	"slices"
	"strings"
	"testing"
)

// web.hosts: the names the web page answers besides its own (for a
// reverse proxy); none by default, a list in the file or a comma list in
// DEN_WEB_HOSTS, shown by den config print; anything but a list of
// strings is refused.
func TestWebHosts(t *testing.T) {
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.WebHosts) != 0 {
		t.Errorf("default web.hosts %v, want none", c.WebHosts)
	}
	file := write(t, "den.yaml", "web:\n  hosts: [status.example.com, \"proxy.example.net:8443\"]\n")
	if c, err = Load(file, nil); err != nil || !slices.Equal(c.WebHosts, []string{"status.example.com", "proxy.example.net:8443"}) {
		t.Errorf("web.hosts from the file: %v (%v)", c.WebHosts, err)
	}
	if _, err := Load(write(t, "den.yaml", "web:\n  hosts: {a: 1}\n"), nil); err == nil || !strings.Contains(err.Error(), "web.hosts") {
		t.Errorf("web.hosts as a map: %v, want an error naming web.hosts", err)
	}
	t.Setenv("DEN_WEB_HOSTS", "a.example, b.example:443")
	settings, c, err := Explain(file, nil)
	if err != nil || !slices.Equal(c.WebHosts, []string{"a.example", "b.example:443"}) {
		t.Fatalf("web.hosts from DEN_WEB_HOSTS: %v (%v)", c.WebHosts, err)
	}
	for _, s := range settings {
		if s.Key == "web.hosts" && (s.Source != "environment DEN_WEB_HOSTS" || s.String() != "[a.example, b.example:443]") {
			t.Errorf("config print: web.hosts %s from %s", s.String(), s.Source)
		}
	}
}
