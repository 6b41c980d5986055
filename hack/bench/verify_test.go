package main

import "testing"

// The goal row reads what BenchmarkVerifyPass250 prints.
func TestParseVerify(t *testing.T) {
	out := "goos: linux\nBenchmarkVerifyPass250-2   \t      20\t  29023089 ns/op\t         0.6342 core-%@5s\t        31.71 cpu-ms/pass\nPASS\n"
	v := parseVerify(out)
	if v.err != nil || v.corePct != 0.6342 || v.cpuMS != 31.71 {
		t.Fatalf("parseVerify = %+v", v)
	}
	if v := parseVerify("FAIL\n"); v.err == nil {
		t.Fatal("parseVerify of no result: no error")
	}
}
