package dirlock

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestAcquireRefusesAHeldDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l, err := Acquire(dir, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, 0o700); !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire = %v, want ErrHeld", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l, err = Acquire(dir, 0o700)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l.Release()
}

// Another process's lock counts too (flock is per open file, so this is
// the case that matters: two agents).
func TestAcquireSeesAnotherProcess(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	dir := t.TempDir()
	holder := exec.Command("flock", "--exclusive", dir, "sh", "-c", "echo locked; exec cat")
	stdin, _ := holder.StdinPipe()
	stdout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); holder.Wait() }()
	// The command runs only once flock(1) holds the lock.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("flock(1): %q %v", line, err)
	}
	if _, err := Acquire(dir, 0o700); !errors.Is(err, ErrHeld) {
		t.Fatalf("Acquire with another process holding it = %v", err)
	}
}

// A directory others may write to is not ours to lock: anyone could plant
// records in it. It is refused and left as it was.
func TestAcquireRefusesASharedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	os.Mkdir(dir, 0o700)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := Acquire(dir, 0o700); err == nil {
		l.Release()
		t.Fatal("Acquire took a 0777 dir")
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o777 {
		t.Fatalf("dir changed to %v", fi.Mode())
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	if l, err := Acquire(link, 0o700); err == nil {
		l.Release()
		t.Fatal("Acquire took a symlink")
	}
}
