package ociimage

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The pause image: the pause command (hack/pause) alone, the infra
// container of the pod sandboxes the suites run, so they need no registry
// and no network.

// PauseRef is what tests tag the pause image as; "localhost/" keeps any
// runtime from trying to pull it from a real registry.
const PauseRef = "localhost/sluice-pause:test"

// PausePackage is the import path of the pause command.
const PausePackage = "github.com/sluicemesh/sluice/hack/pause"

// Pause returns the image whose only file is binary at /pause, its
// entrypoint.
func Pause(binary []byte) (v1.Image, error) {
	return Build([]File{{Path: "/pause", Content: binary}}, Config{Entrypoint: []string{"/pause"}})
}

// PackPause builds the pause command and writes its image, tagged ref, as
// an OCI archive at out.
func PackPause(ctx context.Context, out, ref string) error {
	bin, err := GoBinary(ctx, PausePackage, "")
	if err != nil {
		return err
	}
	img, err := Pause(bin)
	if err != nil {
		return err
	}
	_, err = WriteOCI(out, ref, img)
	return err
}
