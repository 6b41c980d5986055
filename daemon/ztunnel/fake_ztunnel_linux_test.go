package ztunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemesh/sluice/api/zds"
)

// fakeZtunnel is the ztunnel side of the protocol, written from ztunnel's
// inpod code: it reads one request per packet, holds the server to
// ztunnel's rules on fds (exactly one netns fd with an Add, none otherwise)
// and acks when the test says so. Its methods run on the test goroutine.
type fakeZtunnel struct {
	t  *testing.T
	uc *net.UnixConn
}

// request is what the fake received.
type request struct {
	*zds.WorkloadRequest
	netns uint64 // inode of the netns attached to an Add
}

// String names the request for comparing sequences: "add:<uid>",
// "keep:<uid>", "del:<uid>" or "snapshot_sent".
func (r request) String() string {
	switch p := r.Payload.(type) {
	case *zds.WorkloadRequest_Add:
		return "add:" + p.Add.GetUid()
	case *zds.WorkloadRequest_Keep:
		return "keep:" + p.Keep.GetUid()
	case *zds.WorkloadRequest_Del:
		return "del:" + p.Del.GetUid()
	case *zds.WorkloadRequest_SnapshotSent:
		return "snapshot_sent"
	}
	return "unknown"
}

// dialZtunnel connects without saying hello.
func dialZtunnel(t *testing.T, path string) *fakeZtunnel {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("ztunnel: dial %s: %v", path, err)
	}
	t.Cleanup(func() { uc.Close() })
	return &fakeZtunnel{t: t, uc: uc}
}

// connectZtunnel connects and says hello, as ztunnel does.
func connectZtunnel(t *testing.T, path string) *fakeZtunnel {
	t.Helper()
	z := dialZtunnel(t, path)
	z.send(&zds.ZdsHello{Version: zds.Version_V1})
	return z
}

func (z *fakeZtunnel) send(m proto.Message) {
	z.t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		z.t.Fatalf("ztunnel: marshal: %v", err)
	}
	z.sendRaw(b)
}

func (z *fakeZtunnel) sendRaw(b []byte) {
	z.t.Helper()
	if _, _, err := z.uc.WriteMsgUnix(b, nil, nil); err != nil {
		z.t.Fatalf("ztunnel: write: %v", err)
	}
}

func (z *fakeZtunnel) ack(errText string) {
	z.t.Helper()
	z.send(&zds.WorkloadResponse{Payload: &zds.WorkloadResponse_Ack{Ack: &zds.Ack{Error: errText}}})
}

// recv reads the next request, checking its fds.
func (z *fakeZtunnel) recv() request {
	z.t.Helper()
	if err := z.uc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		z.t.Fatal(err)
	}
	// Room for several fds, to catch a server sending more than one.
	buf, oob := make([]byte, 1024), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := z.uc.ReadMsgUnix(buf, oob)
	if err != nil {
		z.t.Fatalf("ztunnel: read request: %v", err)
	}
	fds := rights(z.t, oob[:oobn])
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n == 0 {
		z.t.Fatal("ztunnel: server hung up")
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		z.t.Fatalf("ztunnel: truncated packet (flags %#x)", flags)
	}
	var req zds.WorkloadRequest
	if err := proto.Unmarshal(buf[:n], &req); err != nil {
		z.t.Fatalf("ztunnel: decode request: %v", err)
	}
	r := request{WorkloadRequest: &req}
	if _, isAdd := req.Payload.(*zds.WorkloadRequest_Add); !isAdd {
		if len(fds) != 0 {
			z.t.Fatalf("ztunnel: %s carries %d fds, want none", r, len(fds))
		}
		return r
	}
	if len(fds) != 1 {
		z.t.Fatalf("ztunnel: %s carries %d fds, want exactly 1", r, len(fds))
	}
	r.netns = netnsInode(z.t, fds[0])
	return r
}

// snapshot receives and acks requests up to and including snapshot_sent.
func (z *fakeZtunnel) snapshot() []request {
	z.t.Helper()
	var got []request
	for {
		r := z.recv()
		z.ack("")
		got = append(got, r)
		if r.GetSnapshotSent() != nil {
			return got
		}
		if r.GetDel() != nil {
			z.t.Fatalf("ztunnel: %s inside the snapshot", r)
		}
	}
}

// expectHangup waits for the server to close the connection.
func (z *fakeZtunnel) expectHangup() {
	z.t.Helper()
	if err := z.uc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		z.t.Fatal(err)
	}
	buf := make([]byte, 1024)
	n, _, _, _, err := z.uc.ReadMsgUnix(buf, nil)
	switch {
	case err == nil && n == 0, errors.Is(err, io.EOF), errors.Is(err, unix.ECONNRESET):
	case err != nil:
		z.t.Fatalf("ztunnel: want hang-up, got %v", err)
	default:
		z.t.Fatalf("ztunnel: want hang-up, got a %d-byte packet", n)
	}
}

func rights(t *testing.T, oob []byte) []int {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatalf("ztunnel: parse control messages: %v", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			t.Fatalf("ztunnel: parse SCM_RIGHTS: %v", err)
		}
		fds = append(fds, got...)
	}
	return fds
}

// netnsInode checks that fd is a network namespace other than the test's
// own, as ztunnel would trust it to be, and returns its inode.
func netnsInode(t *testing.T, fd int) uint64 {
	t.Helper()
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		t.Fatalf("ztunnel: NS_GET_NSTYPE on the received fd: %v", err)
	}
	if typ != unix.CLONE_NEWNET {
		t.Fatalf("ztunnel: received namespace type %#x, want CLONE_NEWNET", typ)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino == ownNetnsInode(t) {
		t.Fatal("ztunnel: received the test process's own network namespace")
	}
	return st.Ino
}

// ownNetnsInode reads /proc/thread-self on a locked thread: /proc/self names
// the main thread, which may sit in another netns.
func ownNetnsInode(t *testing.T) uint64 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return inode(t, "/proc/thread-self/ns/net")
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
