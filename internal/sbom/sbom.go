// Package sbom writes the software bill of materials of a shipped binary:
// CycloneDX JSON (github.com/CycloneDX/cyclonedx-go) made from the build
// info the go command embeds in every binary (debug/buildinfo), so it lists
// exactly the modules linked in, at the versions and go.sum hashes the
// build used, and the Go toolchain whose standard library is in it. It
// reads the binary, not go.mod: a module the build left out is not listed.
//
// The output depends only on the binary, its shipped name and version: no
// serial number and no timestamp (both would differ on every run), the
// components in the build info's order (sorted by module path), so two
// generations from the same binary are the same bytes and a reproducible
// build gives a reproducible SBOM.
package sbom

import (
	"bytes"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SpecVersion is the CycloneDX version written: 1.6, the newest the
// common scanners read.
const SpecVersion = cdx.SpecVersion1_6

// FileName is the SBOM's file name for a binary shipped as name.
func FileName(name string) string { return name + ".cdx.json" }

// Read returns the build info embedded in a Go binary.
func Read(bin io.ReaderAt) (*debug.BuildInfo, error) {
	bi, err := buildinfo.Read(bin)
	if err != nil {
		return nil, fmt.Errorf("read the binary's build info: %w", err)
	}
	return bi, nil
}

// Generate returns the CycloneDX JSON of the Go binary bin, shipped as
// name at version. version names the main module's release: a build
// without VCS stamping (the product's) records it as "(devel)".
func Generate(name, version string, bin io.ReaderAt) ([]byte, error) {
	bi, err := Read(bin)
	if err != nil {
		return nil, err
	}
	bom, err := FromBuildInfo(name, version, bi)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).SetEscapeHTML(false)
	if err := enc.EncodeVersion(bom, SpecVersion); err != nil {
		return nil, fmt.Errorf("encode the SBOM of %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// FromBuildInfo is the BOM of a binary with build info bi: the binary as
// the metadata's component (its package and build settings as
// properties), every linked module and the standard library as
// components, and the one dependency edge the build info knows, from the
// binary to each of them (which module needs which it does not record).
func FromBuildInfo(name, version string, bi *debug.BuildInfo) (*cdx.BOM, error) {
	if bi.Main.Path == "" {
		return nil, fmt.Errorf("SBOM of %s: the build info names no main module", name)
	}
	if version == "" {
		version = bi.Main.Version
	}
	mainRef := purl(bi.Main.Path, version)
	props := []cdx.Property{{Name: "cdx:gomod:binary:name", Value: name}, {Name: "cdx:gomod:package", Value: bi.Path}}
	for _, s := range bi.Settings {
		props = append(props, cdx.Property{Name: "cdx:gomod:build:" + s.Key, Value: s.Value})
	}
	main := cdx.Component{
		BOMRef:     mainRef,
		Type:       cdx.ComponentTypeApplication,
		Name:       name,
		Version:    version,
		PackageURL: mainRef,
		Properties: &props,
	}
	// The toolchain: scanners match the standard library's advisories by
	// this purl (what cyclonedx-gomod writes for it).
	std := cdx.Component{
		BOMRef:     purl("std", bi.GoVersion),
		Type:       cdx.ComponentTypeLibrary,
		Name:       "std",
		Version:    bi.GoVersion,
		Scope:      cdx.ScopeRequired,
		PackageURL: purl("std", bi.GoVersion),
		Properties: &[]cdx.Property{{Name: "cdx:gomod:toolchain", Value: bi.GoVersion}},
	}
	components := []cdx.Component{std}
	refs := []string{std.BOMRef}
	for _, dep := range bi.Deps {
		c, err := module(dep)
		if err != nil {
			return nil, fmt.Errorf("SBOM of %s: %w", name, err)
		}
		components = append(components, c)
		refs = append(refs, c.BOMRef)
	}
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{Component: &main}
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{{Ref: mainRef, Dependencies: &refs}}
	return bom, nil
}

// module is one linked module: the replacement when there is one (what
// was built), the module it replaced as a property.
func module(dep *debug.Module) (cdx.Component, error) {
	m, props := dep, []cdx.Property{}
	if dep.Replace != nil {
		m = dep.Replace
		props = append(props, cdx.Property{Name: "cdx:gomod:replaces", Value: dep.Path + "@" + dep.Version})
	}
	c := cdx.Component{
		BOMRef:     purl(m.Path, m.Version),
		Type:       cdx.ComponentTypeLibrary,
		Name:       m.Path,
		Version:    m.Version,
		Scope:      cdx.ScopeRequired,
		PackageURL: purl(m.Path, m.Version),
	}
	if m.Sum != "" {
		h, err := h1Hex(m.Sum)
		if err != nil {
			return cdx.Component{}, fmt.Errorf("module %s@%s: %w", m.Path, m.Version, err)
		}
		// h1 is go.sum's: a SHA-256 over the module's file list and the
		// files' SHA-256s (golang.org/x/mod/sumdb/dirhash), kept verbatim
		// too so `go mod verify` and go.sum can be compared by eye.
		c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: h}}
		props = append(props, cdx.Property{Name: "cdx:gomod:hash:h1", Value: m.Sum})
	}
	if len(props) > 0 {
		c.Properties = &props
	}
	return c, nil
}

// h1Hex is the hex of an "h1:<base64 SHA-256>" go.sum hash.
func h1Hex(sum string) (string, error) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", fmt.Errorf("hash %q is not an h1 hash", sum)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != 32 {
		return "", fmt.Errorf("hash %q is not a base64 SHA-256", sum)
	}
	return hex.EncodeToString(b), nil
}

// purl is a Go module's package URL (the purl spec's golang type; a "+"
// in a version, as in +incompatible, is percent-encoded there).
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + strings.ReplaceAll(version, "+", "%2B") + "?type=module"
}
