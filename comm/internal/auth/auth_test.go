package auth

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

func run(t *testing.T, ctok, stok []byte) (cerr, serr error, ch, sh []byte) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch, serr = Server(b, stok, []byte("server"))
		if serr != nil {
			b.Close()
		}
	}()
	sh, cerr = Client(a, ctok, []byte("client"))
	if cerr != nil {
		a.Close()
	}
	<-done
	return
}

func TestHandshake(t *testing.T) {
	cerr, serr, ch, sh := run(t, []byte("secret"), []byte("secret"))
	if cerr != nil || serr != nil {
		t.Fatal(cerr, serr)
	}
	if string(ch) != "client" || string(sh) != "server" {
		t.Fatalf("hellos %q %q", ch, sh)
	}
}

func TestWrongToken(t *testing.T) {
	cerr, serr, _, _ := run(t, []byte("wrong"), []byte("secret"))
	if !errors.Is(cerr, comm.ErrAuth) {
		t.Errorf("client: %v", cerr)
	}
	if serr == nil {
		t.Errorf("server accepted a client without the token")
	}
}

func TestGarbage(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	b.SetDeadline(time.Now().Add(2 * time.Second))
	go a.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n......................................"))
	if _, err := Server(b, []byte("t"), nil); !errors.Is(err, comm.ErrAuth) {
		t.Fatalf("got %v", err)
	}
}
