package nftnl

import (
	"reflect"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// A node's pods share a handful of rulesets, and marshalling one with
// google/nftables was the largest piece of an Apply after the kernel's
// own work (~0.16–0.23 ms and ~1,400 allocations a pod). So Apply keeps
// the batches it marshalled, by the table's text. A hit is used only when
// the cached table is deeply equal to the one asked for: the batch is a
// deterministic function of the table (set ids by position, messages
// numbered by the socket), so equal tables mean equal bytes, whatever
// Render leaves out. Tables are not changed once built (redirect's Build
// hands them out read-only), so the cached pointer stays what it was.
var batches = batchCache{m: map[batchKey]cachedBatch{}}

// maxCachedBatches bounds the cache; when full it starts over, which
// costs a marshal per distinct ruleset and nothing else.
const maxCachedBatches = 64

type batchKey struct {
	text    string
	replace bool
}

type cachedBatch struct {
	table *nft.Table
	batch []netlink.Message
}

type batchCache struct {
	mu sync.Mutex
	m  map[batchKey]cachedBatch
}

// batchFor is t's batch (create exclusively, or replace), from the cache
// or marshalled now; text names t's rendering (ApplyOn). The caller gets
// its own slice of messages: sending numbers their headers, never their
// data.
func (c *batchCache) batchFor(t *nft.Table, text string, replace bool) ([]netlink.Message, error) {
	k := batchKey{text, replace}
	c.mu.Lock()
	hit, ok := c.m[k]
	c.mu.Unlock()
	if ok && (hit.table == t || reflect.DeepEqual(hit.table, t)) {
		return slices.Clone(hit.batch), nil
	}
	p := newProgram(t)
	batch, err := marshal(func(conn *nftables.Conn) error { return p.build(conn, replace) })
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= maxCachedBatches {
		clear(c.m)
	}
	c.m[k] = cachedBatch{table: t, batch: batch}
	c.mu.Unlock()
	return slices.Clone(batch), nil
}

// removeBatches keeps the batch that deletes a table, by the table's name,
// all it depends on: marshalling it (google/nftables' Conn set up for two
// messages) was a seventh of a Remove's CPU, on every DEL.
var removeBatches = removeCache{m: map[string][]netlink.Message{}}

// maxCachedRemoves bounds removeBatches; an agent uses one table name.
const maxCachedRemoves = 8

type removeCache struct {
	mu sync.Mutex
	m  map[string][]netlink.Message
}

// batchFor is the batch deleting table inet name; the kernel refuses it
// whole with ENOENT when there is no such table (RemoveOn). The caller
// gets its own slice of messages: sending numbers their headers, never
// their data.
func (c *removeCache) batchFor(name string) ([]netlink.Message, error) {
	c.mu.Lock()
	hit, ok := c.m[name]
	c.mu.Unlock()
	if ok {
		return slices.Clone(hit), nil
	}
	table := nlTable(name)
	batch, err := marshal(func(conn *nftables.Conn) error {
		conn.DelTable(table)
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= maxCachedRemoves {
		clear(c.m)
	}
	c.m[name] = batch
	c.mu.Unlock()
	return slices.Clone(batch), nil
}
