// Package auth proves, on a fresh connection, that both ends hold the job
// token, without sending the token: each side sends a random nonce and
// answers with HMAC-SHA256(token, role || both nonces || both hellos).
// The hellos (small, caller-defined, e.g. "tcp rank 3") are bound into the
// MACs, so a man in the middle cannot splice two sessions.
//
// Message flow (client C, server S):
//
//	C -> S: "GDAU" v1 nonceC[32] len(helloC)[2] helloC
//	S -> C: "GDAU" v1 nonceS[32] len(helloS)[2] helloS macS[32]
//	C -> S: macC[32]
//	S -> C: 1 byte, 1 = accepted
//
// The caller sets a deadline on the connection; every read is bounded
// (MaxHello), so a bad peer cannot make either side allocate or wait
// without limit.
package auth

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gdist/gdist/comm"
)

// MaxHello bounds the hello a peer may send.
const MaxHello = 256

const magic = "GDAU"
const version = 1

func mac(token []byte, role string, nc, ns, hc, hs []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(role))
	m.Write(nc)
	m.Write(ns)
	var l [2]byte
	binary.LittleEndian.PutUint16(l[:], uint16(len(hc)))
	m.Write(l[:])
	m.Write(hc)
	binary.LittleEndian.PutUint16(l[:], uint16(len(hs)))
	m.Write(l[:])
	m.Write(hs)
	return m.Sum(nil)
}

func writeHello(w io.Writer, nonce, hello, tail []byte) error {
	b := make([]byte, 0, 4+1+32+2+len(hello)+len(tail))
	b = append(b, magic...)
	b = append(b, version)
	b = append(b, nonce...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(hello)))
	b = append(b, hello...)
	b = append(b, tail...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (nonce, hello []byte, err error) {
	var head [4 + 1 + 32 + 2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, nil, fmt.Errorf("%w: reading hello: %v", comm.ErrAuth, err)
	}
	if string(head[:4]) != magic {
		return nil, nil, fmt.Errorf("%w: not a gdist peer (magic %q)", comm.ErrAuth, head[:4])
	}
	if head[4] != version {
		return nil, nil, fmt.Errorf("%w: protocol version %d, want %d", comm.ErrAuth, head[4], version)
	}
	n := binary.LittleEndian.Uint16(head[37:])
	if n > MaxHello {
		return nil, nil, fmt.Errorf("%w: hello of %d bytes exceeds %d", comm.ErrAuth, n, MaxHello)
	}
	hello = make([]byte, n)
	if _, err := io.ReadFull(r, hello); err != nil {
		return nil, nil, fmt.Errorf("%w: reading hello: %v", comm.ErrAuth, err)
	}
	return append([]byte(nil), head[5:37]...), hello, nil
}

func nonce() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("auth: no randomness: " + err.Error())
	}
	return b
}

// Client runs the client side on rw and returns the server's hello.
func Client(rw io.ReadWriter, token, hello []byte) ([]byte, error) {
	if len(hello) > MaxHello {
		return nil, comm.InvalidArgf("auth: hello too long")
	}
	br := bufio.NewReaderSize(rw, 512)
	nc := nonce()
	if err := writeHello(rw, nc, hello, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", comm.ErrAuth, err)
	}
	ns, hs, err := readHello(br)
	if err != nil {
		return nil, err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, got); err != nil {
		return nil, fmt.Errorf("%w: reading server proof: %v", comm.ErrAuth, err)
	}
	if !hmac.Equal(got, mac(token, "server", nc, ns, hello, hs)) {
		return nil, fmt.Errorf("%w: the server does not hold the job token", comm.ErrAuth)
	}
	if _, err := rw.Write(mac(token, "client", nc, ns, hello, hs)); err != nil {
		return nil, fmt.Errorf("%w: %v", comm.ErrAuth, err)
	}
	var ok [1]byte
	if _, err := io.ReadFull(br, ok[:]); err != nil || ok[0] != 1 {
		return nil, fmt.Errorf("%w: the server refused our proof of the job token", comm.ErrAuth)
	}
	if br.Buffered() > 0 {
		return nil, fmt.Errorf("%w: server sent data before the handshake ended", comm.ErrAuth)
	}
	return hs, nil
}

// Server runs the server side on rw and returns the client's hello.
func Server(rw io.ReadWriter, token, hello []byte) ([]byte, error) {
	if len(hello) > MaxHello {
		return nil, comm.InvalidArgf("auth: hello too long")
	}
	br := bufio.NewReaderSize(rw, 512)
	nc, hc, err := readHello(br)
	if err != nil {
		return nil, err
	}
	ns := nonce()
	if err := writeHello(rw, ns, hello, mac(token, "server", nc, ns, hc, hello)); err != nil {
		return nil, fmt.Errorf("%w: %v", comm.ErrAuth, err)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, got); err != nil {
		return nil, fmt.Errorf("%w: reading client proof: %v", comm.ErrAuth, err)
	}
	if !hmac.Equal(got, mac(token, "client", nc, ns, hc, hello)) {
		rw.Write([]byte{0})
		return nil, fmt.Errorf("%w: the client does not hold the job token", comm.ErrAuth)
	}
	if br.Buffered() > 0 {
		return nil, fmt.Errorf("%w: client sent data before the handshake ended", comm.ErrAuth)
	}
	if _, err := rw.Write([]byte{1}); err != nil {
		return nil, fmt.Errorf("%w: %v", comm.ErrAuth, err)
	}
	return hc, nil
}
