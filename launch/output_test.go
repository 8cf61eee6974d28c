package launch

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// screen is what a terminal shows after out: a carriage return moves to
// the start of the line, a newline to the next, other bytes overwrite.
func screen(out string) []string {
	lines := []string{""}
	col := 0
	for _, r := range out {
		cur := []rune(lines[len(lines)-1])
		switch r {
		case '\r':
			col = 0
		case '\n':
			lines = append(lines, "")
			col = 0
		default:
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
			lines[len(lines)-1] = string(cur)
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	p := newConsole(&b).writer(0, "[r] ")
	p.Write([]byte("a\nb"))
	p.Write([]byte("c\n\nd"))
	p.Flush()
	if got := b.String(); got != "[r] a\n[r] bc\n[r] \n[r] d\n" {
		t.Fatalf("got %q", got)
	}
	// A progress bar's updates pass at once, each prefixed, each drawn
	// over the last; its last line stays.
	b.Reset()
	p.Write([]byte("\rstep 1/3 "))
	p.Write([]byte("\rstep 2/3 "))
	if got := b.String(); got != "\r[r] step 1/3 \r[r] step 2/3 " {
		t.Fatalf("bar: got %q", got)
	}
	p.Write([]byte("\rstep 3/3 \n"))
	if got := screen(b.String()); strings.Join(got, "|") != "[r] step 3/3|" {
		t.Fatalf("bar: screen %q (output %q)", got, b.String())
	}
	// "...\r\n" ends the bar with its last update.
	b.Reset()
	p.Write([]byte("10%\r"))
	p.Write([]byte("100%\r"))
	p.Write([]byte("\n"))
	if got := screen(b.String()); strings.Join(got, "|") != "[r] 100%|" {
		t.Fatalf("bar ended by \\r\\n: screen %q (output %q)", got, b.String())
	}
}

// TestProgressBars: two ranks drawing progress bars with carriage
// returns, while a rank logs lines, the launcher logs a message and rank 0
// writes its stdout, leave a
// readable screen: one progress line (rank 0's, the lowest), never
// written over by another rank's update or line, and every rank's lines
// and final bar lines whole. The launcher's old prefixes (a line per
// update, "[rank 1] ...\r", over whatever was there) left rank 1's bar
// over rank 0's and log lines over the tail of a bar.
func TestProgressBars(t *testing.T) {
	var errOut, out bytes.Buffer
	con := newConsole(&errOut)
	r0, r1 := con.writer(0, "[rank 0] "), con.writer(1, "[rank 1] ")
	stdout := con.raw(&out)
	r0.Write([]byte("\rtraining [=====     ] 50% loss 0.6931"))
	r1.Write([]byte("\rtraining [====      ] 40%"))
	if got := screen(errOut.String()); got[len(got)-1] != "[rank 0] training [=====     ] 50% loss 0.6931" {
		t.Fatalf("the progress line shows %q, want rank 0's bar alone", got[len(got)-1])
	}
	r1.Write([]byte("\ncheckpoint saved\n")) // rank 1's bar ends, then a log line
	r0.Write([]byte("\rtraining [========= ] 90%"))
	con.logf(func(format string, args ...any) { fmt.Fprintf(&errOut, format+"\n", args...) })("launch: %s", "a message")
	r0.Write([]byte("\rtraining [========= ] 95%"))
	stdout.Write([]byte(`{"step":9}` + "\n"))
	r0.Write([]byte("\rtraining [==========] 100%\n"))
	r1.Write([]byte("done\n"))
	want := []string{
		"[rank 1] training [====      ] 40%",
		"[rank 1] checkpoint saved",
		"launch: a message",
		"[rank 0] training [==========] 100%",
		"[rank 1] done",
		"",
	}
	if got := screen(errOut.String()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("screen:\n%s\nwant:\n%s\n(output %q)", strings.Join(got, "\n"), strings.Join(want, "\n"), errOut.String())
	}
	if out.String() != `{"step":9}`+"\n" {
		t.Fatalf("stdout %q, want rank 0's as it is", out.String())
	}
}
