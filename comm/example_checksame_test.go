package comm_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
)

// A vocabulary every rank builds from its own data must number the
// characters the same way on every rank (a Go map's order does not):
// CheckSame fails on every rank naming the ranks that differ.
func ExampleCheckSame() {
	cs, _ := inproc.New(2, comm.Options{})
	errs := make([]error, 2)
	done := make(chan int)
	for _, c := range cs {
		go func() {
			defer c.Close()
			vocab := []string{"a", "c", "b"} // rank 1 forgot to sort
			if c.Rank() == 0 {
				sort.Strings(vocab)
			}
			errs[c.Rank()] = comm.CheckSame(context.Background(), c, "vocabulary", []byte(strings.Join(vocab, "\x00")))
			done <- c.Rank()
		}()
	}
	<-done
	<-done
	fmt.Println(errs[0])
	fmt.Println(errs[1])
	// Output:
	// comm: rank 0: vocabulary differs between ranks: rank 1 has "a\x00c\x00b" where rank 0 has "a\x00b\x00c": first difference at byte 2
	// comm: rank 1: vocabulary differs between ranks: rank 1 has "a\x00c\x00b" where rank 0 has "a\x00b\x00c": first difference at byte 2
}
