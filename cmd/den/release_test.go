package main

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// releaseVersion is what scripts/version.sh may print: a tag's version, or
// the nearest tag's (0.0.0 without one) and the commit, ".dirty" for a
// modified tree.
var releaseVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(\+git[0-9]{8}\.[0-9a-f]{12}(\.dirty)?)?$`)

// scripts/release.sh, for this machine's architecture only (the other is
// a cross-compile of minutes, made by hand): a tarball of a static den
// with the version stamped, the README, the docs and their pictures; the
// .deb beside it; and a SHA256SUMS that sha256sum -c verifies and that
// catches a changed byte.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds den as a release does (a minute or more): skipped under -short")
	}
	for _, tool := range []string{"bash", "git", "tar", "gzip", "sha256sum", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("scripts/release.sh needs %s, not found here: %v", tool, err)
		}
	}
	t.Parallel()
	root := moduleRoot(t)
	out := t.TempDir()
	arch := runtime.GOARCH
	script(t, root, "scripts/release.sh", out, arch)
	version := strings.TrimSpace(script(t, root, "scripts/version.sh"))
	if !releaseVersion.MatchString(version) {
		t.Fatalf("scripts/version.sh says %q, not a release version", version)
	}

	name := "den_" + version + "_linux_" + arch
	deb := "den_" + version + "_" + arch + ".deb"
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{"SHA256SUMS", deb, name + ".tar.gz"}; !slices.Equal(got, want) {
		t.Fatalf("release made %q, want %q", got, want)
	}

	// The tarball: one folder named like it, den executable, the README,
	// every doc and the pictures they show, no Go file.
	dir := t.TempDir()
	files := unpack(t, filepath.Join(out, name+".tar.gz"), dir)
	for _, want := range append(repoFiles(t, root, "README.md", "docs/*.md", "docs/monitoring/*", "testdata/web/*.png", "scripts/den.service", "scripts/den.yaml"), "den") {
		if files[name+"/"+want] == nil {
			t.Errorf("the tarball lacks %s/%s", name, want)
		}
	}
	for f, h := range files {
		if (f != name && !strings.HasPrefix(f, name+"/")) || strings.HasSuffix(f, ".go") || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("the tarball holds %s (uid %d gid %d): want everything under %s/, root's, and no Go", f, h.Uid, h.Gid, name)
		}
	}
	if h := files[name+"/den"]; h != nil && h.Mode&0o111 == 0 {
		t.Errorf("den is not executable in the tarball: mode %o", h.Mode)
	}

	// The binary: static, for the architecture named, saying its version.
	bin := filepath.Join(dir, name, "den")
	checkStatic(t, bin, arch)
	line, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	if !strings.HasPrefix(string(line), "den "+version+", go1.") {
		t.Errorf("den version says %q, want den %s then Go's version", line, version)
	}

	// SHA256SUMS names both files and verifies; a changed byte fails it.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sums), "  "+name+".tar.gz\n") || !strings.Contains(string(sums), "  "+deb+"\n") {
		t.Errorf("SHA256SUMS does not name both files:\n%s", sums)
	}
	verify := func() error {
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = out
		b, err := cmd.CombinedOutput()
		t.Logf("sha256sum -c SHA256SUMS:\n%s", b)
		return err
	}
	if err := verify(); err != nil {
		t.Fatalf("sha256sum -c: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(out, deb), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write([]byte{0})
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	if verify() == nil {
		t.Error("sha256sum -c passes a changed .deb")
	}
}

// script runs a script of the repository with bash and returns its output.
func script(t *testing.T, root, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(root, name)}, args...)...)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s%s", name, args, err, b, stderr.String())
	}
	return string(b)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no module root at %s: %v", root, err)
	}
	return root
}

// repoFiles lists the repository's files matching each pattern, relative
// to its root.
func repoFiles(t *testing.T, root string, patterns ...string) []string {
	t.Helper()
	var files []string
	for _, p := range patterns {
		m, err := filepath.Glob(filepath.Join(root, p))
		if err != nil || len(m) == 0 {
			t.Fatalf("no file matches %s in %s: %v", p, root, err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	return files
}

// unpack extracts a .tar.gz's regular files into dir and returns every
// entry's header by its name (folders without their trailing slash).
func unpack(t *testing.T, archive, dir string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return headers
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !filepath.IsLocal(name) {
			t.Fatalf("%s holds %q, outside its folder", archive, h.Name)
		}
		headers[name] = h
		if h.Typeflag != tar.TypeReg {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&0o755)
		if err == nil {
			_, err = io.Copy(w, tr)
			err = errors.Join(err, w.Close())
		}
		if err != nil {
			t.Fatalf("extract %s: %v", path.Clean(name), err)
		}
	}
}

// checkStatic fails the test unless bin is an ELF executable for goarch
// that needs no dynamic loader and no shared library.
func checkStatic(t *testing.T, bin, goarch string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
	if f.Machine != machine {
		t.Errorf("%s is for %v, want %v (%s)", bin, f.Machine, machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s names a dynamic loader: not static", bin)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %q (%v): not static", bin, libs, err)
	}
}
