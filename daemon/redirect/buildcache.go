package redirect

import (
	"reflect"
	"sync"
)

// A node's pods share a handful of Specs, and building one cost ~55 µs and
// ~250 allocations an ADD (the rendering is half of it), plus ~30 µs for
// the nft batch cache to check the new table deeply against its cached
// one. So Build keeps the Rulesets it built, by Spec: a Ruleset is
// immutable and safe to share, Build is pure, and a Spec is compared with
// reflect.DeepEqual (~3 µs), every field, so a hit is the Ruleset a fresh
// Build would make. The nft batch cache then finds the very table it
// cached and skips its own deep compare.
var built = buildCache{}

// maxBuilt bounds the cache; when full it starts over, which costs a Build
// per distinct Spec and nothing else.
const maxBuilt = 16

type builtRuleset struct {
	spec Spec // a copy the caller cannot change (cloneSpec)
	rs   *Ruleset
}

type buildCache struct {
	mu sync.Mutex
	m  []builtRuleset
}

func (c *buildCache) get(s Spec) *Ruleset {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.m {
		if reflect.DeepEqual(e.spec, s) {
			return e.rs
		}
	}
	return nil
}

func (c *buildCache) put(s Spec, rs *Ruleset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxBuilt {
		c.m = c.m[:0]
	}
	c.m = append(c.m, builtRuleset{spec: cloneSpec(s), rs: rs})
}

// cloneSpec copies every slice of s, so a caller that changes its Spec's
// slices after Build does not change the key a cached Ruleset is found by.
// The elements are values (ports, prefixes, strings), so copying the
// slices copies everything; TestSpecFieldsAreCloneable keeps it so.
func cloneSpec(s Spec) Spec {
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Slice && !f.IsNil() {
			c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(c, f)
			f.Set(c)
		}
	}
	return s
}
