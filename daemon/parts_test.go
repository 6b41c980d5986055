package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// recordingPart logs each step it takes into a shared list.
type recordingPart struct {
	basePart
	name    string
	log     *[]string
	failing bool
}

func (p recordingPart) start(context.Context, func(error)) error {
	*p.log = append(*p.log, "start "+p.name)
	if p.failing {
		return errors.New(p.name + " failed")
	}
	return nil
}

func (p recordingPart) stop(leaving, drained bool) {
	*p.log = append(*p.log, fmt.Sprintf("stop %s leaving=%v drained=%v", p.name, leaving, drained))
}

func agentWithParts(log *[]string, failing string, names ...string) *agent {
	a := &agent{errc: make(chan error, 1)}
	a.ctx, a.stopBackground = context.WithCancel(context.Background())
	for _, n := range names {
		a.parts = append(a.parts, recordingPart{name: n, log: log, failing: n == failing})
	}
	return a
}

// Parts start in order and stop in reverse, in both phases.
func TestPartsStopInReverse(t *testing.T) {
	var log []string
	a := agentWithParts(&log, "", "policy", "ambient", "installer")
	if err := a.startParts(); err != nil {
		t.Fatal(err)
	}
	a.stopParts(true, false)
	a.stopParts(true, true)
	want := []string{"start policy", "start ambient", "start installer",
		"stop installer leaving=true drained=false", "stop ambient leaving=true drained=false", "stop policy leaving=true drained=false",
		"stop installer leaving=true drained=true", "stop ambient leaving=true drained=true", "stop policy leaving=true drained=true"}
	if !slices.Equal(log, want) {
		t.Errorf("steps:\n%q\nwant\n%q", log, want)
	}
}

// A failed start stops what started before it, in reverse and not as
// leaving, ends the background, and never starts what comes after.
func TestFailedStartUnwinds(t *testing.T) {
	var log []string
	a := agentWithParts(&log, "installer", "policy", "ambient", "installer", "nri")
	err := a.startParts()
	if err == nil || err.Error() != "installer failed" {
		t.Fatalf("startParts = %v, want the installer's error", err)
	}
	want := []string{"start policy", "start ambient", "start installer",
		"stop ambient leaving=false drained=false", "stop policy leaving=false drained=false",
		"stop ambient leaving=false drained=true", "stop policy leaving=false drained=true"}
	if !slices.Equal(log, want) {
		t.Errorf("steps:\n%q\nwant\n%q", log, want)
	}
	if a.ctx.Err() == nil {
		t.Error("the background context still runs after a failed start")
	}
}
