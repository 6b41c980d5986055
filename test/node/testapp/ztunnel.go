package main

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemesh/sluice/api/zds"
)

// runZtunnel speaks ztunnel's side of ZDS on socket, and for each pod it
// is handed listens on 15001 and 15006 inside the pod's netns, as ztunnel
// does. It redials when the agent goes away (a restart, an upgrade) and
// takes the agent's snapshot afresh.
func runZtunnel(args []string) error {
	if len(args) != 1 {
		return errors.New("ztunnel: want SOCKET")
	}
	pods := map[string][]net.Listener{}
	for {
		err := zdsSession(args[0], pods)
		fmt.Printf("ztunnel session ended: %v\n", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// zdsSession is one connection: hello, then one request at a time, each
// acked.
func zdsSession(path string, pods map[string][]net.Listener) error {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("dial %s: %w", path, err)
	}
	defer uc.Close()
	if err := send(uc, &zds.ZdsHello{Version: zds.Version_V1}); err != nil {
		return err
	}
	fmt.Printf("ztunnel connected to %s\n", path)
	for {
		req, fd, err := recv(uc)
		if err != nil {
			return err
		}
		ackErr := handle(req, fd, pods)
		if fd >= 0 {
			unix.Close(fd)
		}
		ack := &zds.Ack{}
		if ackErr != nil {
			ack.Error = ackErr.Error()
		}
		if err := send(uc, &zds.WorkloadResponse{Payload: &zds.WorkloadResponse_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

func handle(req *zds.WorkloadRequest, fd int, pods map[string][]net.Listener) error {
	switch p := req.Payload.(type) {
	case *zds.WorkloadRequest_Add:
		uid := p.Add.GetUid()
		closeAll(pods[uid])
		ls, err := listenInNetns(fd, uid)
		if err != nil {
			fmt.Printf("ztunnel add %s: %v\n", uid, err)
			return err
		}
		pods[uid] = ls
		fmt.Printf("ztunnel add %s %s/%s\n", uid, p.Add.GetWorkloadInfo().GetNamespace(), p.Add.GetWorkloadInfo().GetName())
	case *zds.WorkloadRequest_Keep:
		fmt.Printf("ztunnel keep %s\n", p.Keep.GetUid())
	case *zds.WorkloadRequest_Del:
		uid := p.Del.GetUid()
		closeAll(pods[uid])
		delete(pods, uid)
		fmt.Printf("ztunnel del %s\n", uid)
	case *zds.WorkloadRequest_SnapshotSent:
		fmt.Println("ztunnel snapshot sent")
	}
	return nil
}

// listenInNetns opens the pod's listeners from a thread that entered its
// netns; the thread is never returned to the runtime, so no other
// goroutine runs in the pod's netns.
func listenInNetns(fd int, uid string) ([]net.Listener, error) {
	if fd < 0 {
		return nil, errors.New("add without a netns fd")
	}
	type result struct {
		ls  []net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		var ls []net.Listener
		for _, port := range []string{"15001", "15006"} {
			l, err := listenTransparent("[::]:" + port)
			if err != nil {
				closeAll(ls)
				done <- result{err: err}
				return
			}
			ls = append(ls, l)
		}
		done <- result{ls: ls}
	}()
	r := <-done
	for _, l := range r.ls {
		go func() { _ = serveCaptured(l, "ztunnel "+uid) }()
	}
	return r.ls, r.err
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

func send(uc *net.UnixConn, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("marshal: %w", err)
	}
	if _, _, err := uc.WriteMsgUnix(b, nil, nil); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// recv reads one request and the netns fd an Add carries (-1 if none).
func recv(uc *net.UnixConn) (*zds.WorkloadRequest, int, error) {
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, -1, fmt.Errorf("read: %w", err)
	}
	if n == 0 {
		return nil, -1, errors.New("agent hung up")
	}
	fd := -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, f := range fds {
				if fd < 0 {
					fd = f
				} else {
					unix.Close(f)
				}
			}
		}
	}
	var req zds.WorkloadRequest
	if err := proto.Unmarshal(buf[:n], &req); err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, -1, fmt.Errorf("decode: %w", err)
	}
	return &req, fd, nil
}
