package istioadopt

import "github.com/vishvananda/netns"

// Kernel reads and removes istio-cni's capture in a netns: Netlink, or a
// wrapper in tests that need a removal to fail.
type Kernel interface {
	Detect(ns netns.NsHandle) (Capture, error)
	Remove(ns netns.NsHandle, c Capture) error
}

// Netlink is the Kernel over netlink: Detect and Remove.
type Netlink struct{}

func (Netlink) Detect(ns netns.NsHandle) (Capture, error) { return Detect(ns) }
func (Netlink) Remove(ns netns.NsHandle, c Capture) error { return Remove(ns, c) }
