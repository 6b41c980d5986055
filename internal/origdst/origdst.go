// Package origdst reads the destination a connection had before the
// kernel's nat REDIRECT rewrote it to a local proxy port: what a proxy on
// 15001 or 15006 needs to know where the client meant to go.
package origdst
