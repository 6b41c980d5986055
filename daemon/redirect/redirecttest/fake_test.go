package redirecttest

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The fake must tell the truth the tests above it rely on.
func TestFake(t *testing.T) {
	ns := NewNamespaces(t)
	ino := ns.Add("/netns/a")
	handle, err := ns.Open("/netns/a")
	if err != nil {
		t.Fatal(err)
	}
	defer handle.Close()
	if got, _ := Inode(handle); got != ino {
		t.Fatalf("handle inode %d, want %d", got, ino)
	}
	side, _ := redirect.Build(redirect.DefaultSpec())
	amb, _ := redirect.Build(redirect.DefaultAmbientSpec())
	k := NewFake()
	h := redirect.Netns(handle)
	if d, _ := k.Verify(h, side); len(d) != 1 {
		t.Fatalf("Verify of an empty netns: %v", d)
	}
	k.Fail(OpApply, errors.New("no"))
	if _, err := k.Apply(h, side); err == nil || k.Tamper(ino) {
		t.Fatal("a failed Apply left a table")
	}
	k.Fail(OpApply, nil)
	gen, err := k.Apply(h, side)
	if err != nil || gen == 0 {
		t.Fatal(gen, err)
	}
	if d, _ := k.Verify(h, side); len(d) != 0 {
		t.Fatalf("Verify after Apply: %v", d)
	}
	if d, g, _ := k.VerifySince(h, side, gen); len(d) != 0 || g != gen || k.Calls(OpVerify) != 2 {
		t.Fatalf("VerifySince at Apply's generation: %v, %d, %d full reads", d, g, k.Calls(OpVerify))
	}
	if d, _ := k.Verify(h, amb); len(d) != 1 {
		t.Fatalf("Verify against another ruleset: %v", d)
	}
	k.Tamper(ino)
	if d, _ := k.Verify(h, side); len(d) != 1 {
		t.Fatalf("Verify after Tamper: %v", d)
	}
	if d, g, _ := k.VerifySince(h, side, gen); len(d) != 1 || g == gen {
		t.Fatalf("VerifySince after Tamper: %v, generation %d (was %d)", d, g, gen)
	}
	a := netip.MustParseAddr("10.0.0.1")
	k.AddHostIPs(h, a, netip.MustParseAddr("::ffff:10.0.0.2"))
	k.RemoveHostIPs(h, netip.MustParseAddr("10.0.0.2"))
	if got := k.HostIPs(ino); len(got) != 1 || got[0] != a {
		t.Fatalf("host addresses %v", got)
	}
	if k.Remove(h, nil) != nil || k.Tamper(ino) || k.Calls(OpApply) != 2 {
		t.Fatal("Remove left the table, or calls miscounted")
	}
}

func TestNamespaces(t *testing.T) {
	ns := NewNamespaces(t)
	first := ns.Add("/netns/a")
	if again := ns.Replace("/netns/a"); again == first {
		t.Fatal("Replace kept the inode")
	}
	ns.Delete("/netns/a")
	if _, err := ns.Open("/netns/a"); !errors.Is(err, podns.ErrNotExist) {
		t.Fatalf("Open of a deleted netns: %v", err)
	}
	var rule *podns.RuleError
	if _, err := ns.Open("rel"); !errors.As(err, &rule) {
		t.Fatalf("Open of a relative path: %v", err)
	}
}
