package repair

import "testing"

func TestParseLabel(t *testing.T) {
	for in, ok := range map[string]bool{
		"cni.istio.io/uninitialized=true": true, "sluice.dev/uncaptured=true": true, "a=": true,
		"novalue": false, "=x": false, "bad key=true": false, "k=bad value": false,
	} {
		if _, err := ParseLabel(in); (err == nil) != ok {
			t.Errorf("ParseLabel(%q) err = %v, want ok %v", in, err, ok)
		}
	}
}
