package nodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Suite is what a node suite's TestMain says about itself; Main does what
// every suite did the same way: the binaries, a temporary image dir, the
// cluster's start, the tests, the logs on failure and the stop.
type Suite struct {
	Name string // the suite's path, "test/peer", for messages
	// Images builds the suite's images into dir (removed after the run)
	// and returns the archives to load into every node.
	Images func(ctx context.Context, dir string) ([]string, error)
	// Options are the cluster's; Main fills in the binaries' dirs and
	// Images.
	Options Options
	// Started runs once the cluster is up, before the tests, with the
	// Options it was started with: the suite keeps the cluster, and may
	// install what every test needs. An error fails the run.
	Started func(ctx context.Context, c *Cluster, opts Options) error
	// Logs, if set, are printed after the cluster's when a test failed.
	Logs func() string
}

// Main runs the suite's tests on a cluster of its own and exits; not as
// root it says why and exits 0.
func (s Suite) Main(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Printf("%s: needs root (network and mount namespaces, cgroups); not run\n", s.Name)
		os.Exit(0)
	}
	code, err := s.run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, s.Name+":", err)
		code = 1
	}
	os.Exit(code)
}

func (s Suite) run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	opts := s.Options
	var err error
	if opts.KubeBinDir, err = KubeBinaries(ctx); err != nil {
		return 0, err
	}
	if opts.CNIBinDir, err = CNIPlugins(ctx); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "sluice-"+filepath.Base(s.Name)+"-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if opts.Images, err = s.Images(ctx, dir); err != nil {
		return 0, err
	}
	c, err := Start(ctx, opts)
	if err != nil {
		return 0, err
	}
	code := 1
	if err = s.Started(ctx, c, opts); err == nil {
		code = m.Run()
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s: the cluster's logs (kept in full only when teardown fails):\n%s", s.Name, c.LogTails())
		if s.Logs != nil {
			fmt.Fprintln(os.Stderr, s.Logs())
		}
	}
	if stopErr := c.Stop(); stopErr != nil {
		return 1, errors.Join(err, stopErr)
	}
	return code, err
}
