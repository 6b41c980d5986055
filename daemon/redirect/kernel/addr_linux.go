package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/internal/netnsthread"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// Envoy's inbound passthrough cluster binds ::6 when it forwards to the
// app; istio-iptables adds the address to lo (tools/common/tproxy
// configureIPv6Addresses) in every IPv6 sidecar pod, so Apply does too.
//
// Which ::6 is ours is told by the address's protocol (IFA_PROTO, Linux
// 6.1 and later), set to addrProtocol when Apply adds it, the way routes
// and rules carry routeProtocol: Remove deletes only an address with that
// mark, and leaves one the pod (or istio-iptables) put there itself. No
// journal field is needed to know it. On kernels without IFA_PROTO the
// mark is not kept, and an address that lacks it is never removed: at
// worst ::6 outlives sluice on lo, which is harmless.
const (
	addrProtocol = routeProtocol
	ifaProto     = 11 // IFA_PROTO
)

// loAddr is one address on lo as the kernel reports it.
type loAddr struct {
	addr  netip.Addr
	proto uint8
}

// listLoAddrs dumps lo's IPv6 addresses with their protocol, which
// vishvananda/netlink does not decode, over rt (rtnetlink in the netns).
func listLoAddrs(rt *nlsock.Conn, lo int) ([]loAddr, error) {
	msgs, err := rt.Execute(mnl.Message{
		Header: mnl.Header{Type: unix.RTM_GETADDR, Flags: mnl.Request | mnl.Dump},
		Data:   nl.NewIfAddrmsg(unix.AF_INET6).Serialize(),
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []loAddr
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWADDR || len(m.Data) < unix.SizeofIfAddrmsg {
			continue
		}
		hdr := nl.DeserializeIfAddrmsg(m.Data)
		if int(hdr.Index) != lo || hdr.Family != unix.AF_INET6 {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m.Data[unix.SizeofIfAddrmsg:])
		if err != nil {
			return nil, fmt.Errorf("parse address: %w", err)
		}
		var a loAddr
		for _, at := range attrs {
			switch at.Attr.Type {
			case unix.IFA_ADDRESS:
				a.addr, _ = netip.AddrFromSlice(at.Value)
			case ifaProto:
				if len(at.Value) > 0 {
					a.proto = at.Value[0]
				}
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// routeConn opens rtnetlink in ns (nlsock: a thread of its own moved in
// and back); the caller closes it.
func routeConn(ns netns.NsHandle) (*nlsock.Conn, error) {
	socks, err := nlsock.Open(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return socks[0].Conn(), nil
}

// loAddrMsg is an RTM_NEWADDR or RTM_DELADDR body for a/128 on lo.
func loAddrMsg(lo int, a netip.Addr, attrs ...*nl.RtAttr) []byte {
	msg := nl.NewIfAddrmsg(unix.AF_INET6)
	msg.Prefixlen = 128
	msg.Scope = unix.RT_SCOPE_HOST
	msg.Index = uint32(lo)
	data := msg.Serialize()
	attrs = append([]*nl.RtAttr{nl.NewRtAttr(unix.IFA_LOCAL, a.AsSlice()), nl.NewRtAttr(unix.IFA_ADDRESS, a.AsSlice())}, attrs...)
	for _, at := range attrs {
		data = append(data, at.Serialize()...)
	}
	return data
}

// delLoAddr deletes a/128 from lo; one that is not there is not an error.
func delLoAddr(rt *nlsock.Conn, lo int, a netip.Addr) error {
	_, err := rt.Execute(mnl.Message{
		Header: mnl.Header{Type: unix.RTM_DELADDR, Flags: mnl.Request | mnl.Acknowledge},
		Data:   loAddrMsg(lo, a),
	})
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return err
	}
	return nil
}

// addLoAddr adds a/128 to lo marked as ours, over rt (rtnetlink in the
// pod's netns); NODAD as lo never runs DAD anyway, and so the address is
// usable the moment Apply returns. An address already there, ours or not,
// is left alone: added is false.
func addLoAddr(rt *nlsock.Conn, lo int, a netip.Addr) (added bool, err error) {
	_, err = rt.Execute(mnl.Message{
		Header: mnl.Header{Type: unix.RTM_NEWADDR, Flags: mnl.Request | mnl.Create | mnl.Excl | mnl.Acknowledge},
		Data: loAddrMsg(lo, a,
			nl.NewRtAttr(unix.IFA_FLAGS, nl.Uint32Attr(unix.IFA_F_NODAD)),
			nl.NewRtAttr(ifaProto, []byte{addrProtocol})),
	})
	switch {
	case errors.Is(err, unix.EEXIST):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("add %s/128 to %s: %w", a, redirect.LoopbackInterface, err)
	}
	return true, nil
}

// ensureLoAddrs adds each wanted address lo lacks, over rt, and returns
// those it added; one already there, ours or not, is left alone. It asks
// the kernel to create each exclusively rather than listing lo's addresses
// first: one round trip, not three, on every sidecar ADD.
func ensureLoAddrs(rt *nlsock.Conn, want []netip.Addr) ([]netip.Addr, error) {
	var added []netip.Addr
	for _, w := range want {
		ok, err := addLoAddr(rt, loopbackIndex, w)
		if err != nil {
			return added, err
		}
		if ok {
			added = append(added, w)
		}
	}
	return added, nil
}

// undoLoAddrs deletes what ensureLoAddrs added, over the same rt.
func undoLoAddrs(rt *nlsock.Conn, added []netip.Addr) error {
	var errs []error
	for _, a := range added {
		if err := delLoAddr(rt, loopbackIndex, a); err != nil {
			errs = append(errs, fmt.Errorf("take back %s on %s: %w", a, redirect.LoopbackInterface, err))
		}
	}
	return errors.Join(errs...)
}

// pruneLoAddrs deletes every address on lo marked as ours that keep does
// not name.
func pruneLoAddrs(rt *nlsock.Conn, keep []netip.Addr) error {
	have, err := listLoAddrs(rt, loopbackIndex)
	if err != nil {
		return err
	}
	for _, a := range have {
		if a.proto != addrProtocol || containsFunc(keep, func(k netip.Addr) bool { return k == a.addr }) {
			continue
		}
		if err := delLoAddr(rt, loopbackIndex, a.addr); err != nil {
			return fmt.Errorf("delete %s from %s: %w", a.addr, redirect.LoopbackInterface, err)
		}
	}
	return nil
}

// loAddrDrift names each wanted address lo lacks and each of ours on it
// that is not wanted, given lo's addresses.
func loAddrDrift(have []loAddr, want []netip.Addr) []string {
	var drift []string
	for _, w := range want {
		if !containsFunc(have, func(h loAddr) bool { return h.addr == w }) {
			drift = append(drift, fmt.Sprintf("address %s/128 on %s is missing", w, redirect.LoopbackInterface))
		}
	}
	for _, h := range have {
		if h.proto == addrProtocol && !containsFunc(want, func(w netip.Addr) bool { return w == h.addr }) {
			drift = append(drift, fmt.Sprintf("address %s/128 on %s is not part of the ruleset", h.addr, redirect.LoopbackInterface))
		}
	}
	return drift
}

// loopbackIndex is lo's ifindex: the kernel gives lo LOOPBACK_IFINDEX (1)
// in every netns (since Linux 3.12), so it is not looked up by name, which
// cost a netlink socket and a link dump per Apply and Remove.
const loopbackIndex = 1

// loState is lo's index and IPv6 addresses; none when lo has no IPv6.
func loState(ns netns.NsHandle) (int, []loAddr, error) {
	rt, err := routeConn(ns)
	if err != nil {
		return 0, nil, err
	}
	defer rt.Close()
	have, err := listLoAddrs(rt, loopbackIndex)
	return loopbackIndex, have, err
}

// loIPv6Disabled reads net.ipv6.conf.lo.disable_ipv6 in ns (set by the
// pod's own sysctls, or through net.ipv6.conf.all). /proc/sys shows the
// netns of the thread that opens it, so the read runs on a thread of its
// own moved into ns; the caller's thread never changes namespace. A
// kernel without IPv6 at all has no such file, which counts as disabled.
func loIPv6Disabled(ns netns.NsHandle) (bool, error) {
	var data []byte
	err := netnsthread.Do(ns, func() error {
		var err error
		data, err = os.ReadFile("/proc/sys/net/ipv6/conf/" + redirect.LoopbackInterface + "/disable_ipv6")
		return err
	})
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read %s's disable_ipv6 in netns fd %d: %w", redirect.LoopbackInterface, int(ns), err)
	}
	return strings.TrimSpace(string(data)) != "0", nil
}
