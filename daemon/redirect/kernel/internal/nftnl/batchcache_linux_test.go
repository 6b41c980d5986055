package nftnl

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// wire is what send puts on the socket for batch, less the numbering the
// socket adds (sequence and port id, which send clears).
func wire(t *testing.T, batch []netlink.Message) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, m := range batch {
		m.Header.Sequence, m.Header.PID = 0, 0
		m.Header.Length = uint32(16+len(m.Data)+3) &^ 3 // header + data, aligned
		enc, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(enc)
	}
	return b.Bytes()
}

func fresh(t *testing.T, tb *nft.Table, replace bool) []byte {
	t.Helper()
	p := newProgram(tb)
	batch, err := marshal(func(c *nftables.Conn) error { return p.build(c, replace) })
	if err != nil {
		t.Fatal(err)
	}
	return wire(t, batch)
}

// The cache hands out the bytes a fresh marshal makes, on a miss and on a
// hit, for an equal table built separately; sending a batch (which
// numbers its headers) does not change what the next caller gets.
func TestBatchCacheServesWhatMarshalMakes(t *testing.T) {
	c := batchCache{m: map[batchKey]cachedBatch{}}
	for _, replace := range []bool{false, true} {
		wide, _ := testTables()
		want := fresh(t, wide, replace)
		for i := range 3 {
			again, _ := testTables() // equal, not the same pointer
			b, err := c.batchFor(again, again.Render(), replace)
			if err != nil {
				t.Fatal(err)
			}
			if got := wire(t, b); !bytes.Equal(got, want) {
				t.Fatalf("replace %t, call %d: the batch differs from a fresh marshal", replace, i)
			}
			for j := range b {
				b[j].Header.Sequence, b[j].Header.Flags = 99, 0 // what sending does to the caller's copy
			}
		}
	}
}

// A cached batch is never used for a table that differs from the one it
// was made for, even when the key text collides (a Render that left a
// difference out): the table itself is compared.
func TestBatchCacheChecksTheTableNotTheKey(t *testing.T) {
	c := batchCache{m: map[batchKey]cachedBatch{}}
	first, _ := testTables()
	if _, err := c.batchFor(first, "same text", false); err != nil {
		t.Fatal(err)
	}
	other, _ := testTables()
	other.Chains[0].Rules[0].Tag += "-changed"
	b, err := c.batchFor(other, "same text", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := wire(t, b), fresh(t, other, false); !bytes.Equal(got, want) {
		t.Fatal("a colliding key served the other table's batch")
	}
}

// The cache stays bounded.
func TestBatchCacheIsBounded(t *testing.T) {
	c := batchCache{m: map[batchKey]cachedBatch{}}
	for i := range 3 * maxCachedBatches {
		tb, _ := testTables()
		tb.Name = fmt.Sprintf("t%d", i)
		if _, err := c.batchFor(tb, tb.Render(), false); err != nil {
			t.Fatal(err)
		}
		if c.len() > maxCachedBatches {
			t.Fatalf("%d batches cached, bound %d", c.len(), maxCachedBatches)
		}
	}
}

func (c *batchCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// The remove batch from the cache is, by name, on a miss and on hits
// whatever a caller did to its copy: begin, add the table, delete it, end;
// and the cache stays bounded.
func TestRemoveCacheServesTheDeleteBatch(t *testing.T) {
	c := removeCache{m: map[string][]netlink.Message{}}
	wantTypes := []netlink.HeaderType{0x10, 0xa02, 0x11} // BATCH_BEGIN, DELTABLE, BATCH_END
	for _, name := range []string{"sluice", "other"} {
		var first []byte
		for i := range 3 {
			b, err := c.batchFor(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != len(wantTypes) {
				t.Fatalf("%s, call %d: %d messages, want %d", name, i, len(b), len(wantTypes))
			}
			for j, m := range b {
				if m.Header.Type != wantTypes[j] {
					t.Fatalf("%s, call %d: message %d is type %#x, want %#x", name, i, j, m.Header.Type, wantTypes[j])
				}
			}
			for _, j := range []int{1} {
				if !bytes.Contains(b[j].Data, append([]byte(name), 0)) {
					t.Fatalf("%s, call %d: message %d does not name the table", name, i, j)
				}
			}
			if i == 0 {
				first = wire(t, b)
			} else if !bytes.Equal(wire(t, b), first) {
				t.Fatalf("%s, call %d: a hit differs from the first batch", name, i)
			}
			for j := range b {
				b[j].Header.Sequence, b[j].Header.Flags = 99, 0 // what sending does to the caller's copy
			}
		}
	}
	for i := range 3 * maxCachedRemoves {
		if _, err := c.batchFor(fmt.Sprintf("t%d", i)); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		n := len(c.m)
		c.mu.Unlock()
		if n > maxCachedRemoves {
			t.Fatalf("%d remove batches cached, bound %d", n, maxCachedRemoves)
		}
	}
}
