package redirect

import (
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/sluicemesh/sluice/internal/nstest"
	"github.com/vishvananda/netns"
)

func expVariant(h netns.NsHandle, r *Ruleset, v string) error {
	var opts []nftables.ConnOption
	if strings.HasPrefix(v, "L") {
		opts = append(opts, nftables.AsLasting())
	}
	conn, err := dial(h, opts...)
	if err != nil {
		return err
	}
	if strings.HasPrefix(v, "L") {
		defer func() {
			st := time.Now()
			conn.CloseLasting()
			closeDur = append(closeDur, time.Since(st))
		}()
	}
	switch v {
	case "Lfull":
		conn.AddTable(table)
		conn.DelTable(table)
		conn.AddTable(table)
	case "Lexcl":
		conn.CreateTable(table)
	case "Lget":
		_, err := conn.ListTableOfFamily(TableName, nftables.TableFamilyINet)
		if err == nil {
			conn.AddTable(table)
			conn.DelTable(table)
			conn.AddTable(table)
		} else if errors.Is(err, unix.ENOENT) {
			conn.CreateTable(table)
		} else {
			return err
		}
	case "noop":
		return nil
	case "table":
		conn.AddTable(table)
		return conn.Flush()
	case "adddeladd-table":
		conn.AddTable(table)
		conn.DelTable(table)
		conn.AddTable(table)
		return conn.Flush()
	case "full-nodel", "full", "excl":
		conn.AddTable(table)
		if v == "excl" {
			conn.CreateTable(table)
		}
		if v == "full" {
			conn.DelTable(table)
			conn.AddTable(table)
		}
	case "regularchains":
		conn.AddTable(table)
		conn.AddChain(&nftables.Chain{Name: "x", Table: table})
		return conn.Flush()
	case "natchain1":
		conn.AddTable(table)
		conn.AddChain(nlChain(r.chains[0]))
		return conn.Flush()
	}
	p := newProgram(r)
	for i, s := range p.sets {
		if err := conn.AddSet(s, p.elems[i]); err != nil {
			return err
		}
	}
	for _, c := range p.chains {
		conn.AddChain(c)
	}
	for _, rl := range p.rules {
		conn.AddRule(rl)
	}
	return conn.Flush()
}

func TestExpVariants(t *testing.T) {
	r, _ := Build(DefaultSpec())
	for _, v := range expList() {
		var ds []time.Duration
		for i := 0; i < 30; i++ {
			ns := nstest.New(t, fmt.Sprintf("p%d", i))
			h := ns.Handle(t)
			vv := v
			if strings.HasSuffix(v, "-again") {
				if err := expVariant(h, r, "full"); err != nil {
					t.Fatal(err)
				}
				vv = strings.TrimSuffix(v, "-again")
			}
			st := time.Now()
			if err := expVariant(h, r, vv); err != nil {
				t.Fatal(v, err)
			}
			ds = append(ds, time.Since(st))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		sort.Slice(closeDur, func(i, j int) bool { return closeDur[i] < closeDur[j] })
		if len(closeDur) > 0 {
			t.Logf("   close p50 %v", closeDur[len(closeDur)/2])
		}
		closeDur = nil
		t.Logf("%-18s p50 %v min %v max %v", v, ds[len(ds)/2], ds[0], ds[len(ds)-1])
	}
}

var closeDur []time.Duration

func expList() []string {
	if v := os.Getenv("EXPV"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"noop", "table", "adddeladd-table", "regularchains", "natchain1", "full-nodel", "full", "full-again"}
}
