package redirect

import (
	"net/netip"
	"reflect"
	"testing"
)

// An equal Spec gets the Ruleset built before, and every golden Spec gets
// what a fresh build makes of it, whatever was cached before it.
func TestBuildCacheServesWhatBuildMakes(t *testing.T) {
	a, err := Build(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := Build(DefaultSpec()); b != a {
		t.Error("an equal Spec was built again")
	}
	for name, s := range Examples() {
		for i := range 2 {
			got, err := Build(s)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want, _ := build(s)
			if got.Render() != want.Render() || !reflect.DeepEqual(got.table, want.table) {
				t.Errorf("%s, Build #%d: not what a fresh build makes", name, i+1)
			}
		}
	}
}

// The cache keeps its own copy of a Spec: a caller that changes its Spec's
// slices after Build gets the ruleset of the changed Spec next time, not
// the one cached under the old contents.
func TestBuildCacheKeyIsACopy(t *testing.T) {
	s := DefaultSpec()
	s.ExcludeInboundPorts = []uint16{22}
	s.ExcludeOutboundCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	s.ExcludeInterfaces = []string{"eth9"}
	before, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	s.ExcludeInboundPorts[0] = 2222
	s.ExcludeOutboundCIDRs[0] = netip.MustParsePrefix("192.168.0.0/16")
	s.ExcludeInterfaces[0] = "eth8"
	after, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := build(s)
	if after == before || after.Render() != want.Render() {
		t.Fatalf("Build after the Spec changed returned the cached ruleset:\n%s", after.Render())
	}
}

// cloneSpec copies slices only: that copies a Spec deeply as long as no
// field (or slice element) holds a map, pointer, interface or nested slice.
// A field added with one fails here, before it can alias a cached key.
func TestSpecFieldsAreCloneable(t *testing.T) {
	opaque := map[reflect.Type]bool{ // immutable values with an interned pointer inside
		reflect.TypeFor[netip.Addr]():   true,
		reflect.TypeFor[netip.Prefix](): true,
	}
	plain := func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return true
		case reflect.Struct:
			return opaque[ty]
		}
		return false
	}
	st := reflect.TypeFor[Spec]()
	for i := range st.NumField() {
		f := st.Field(i)
		ty := f.Type
		if ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if !plain(ty) {
			t.Errorf("Spec.%s (%s): cloneSpec would share it between the caller and the build cache", f.Name, f.Type)
		}
	}
}
