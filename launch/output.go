package launch

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// console is where the launcher writes its children's output: rank 0's
// stdout as it is (raw) and every other stream a line at a time with the
// rank's prefix (writer), to one terminal (or file) under one lock.
//
// Progress bars are lines their program redraws with a carriage return
// ("\rstep 3/10"): the console keeps one progress line at a time, that of
// the lowest rank drawing one (a rank's line shows if no rank's does, or
// its rank is lower; the others' updates are dropped, their final lines,
// which end with a newline, are kept). Each update is drawn over the last
// ("\r[rank 0] step 3/10", padded with spaces over a longer one), and
// before any other output (a line of any rank, rank 0's stdout, the
// launcher's messages) the progress line is cleared, so that nothing is written over part of it;
// the next update draws it again under that output.
type console struct {
	mu      sync.Mutex
	w       io.Writer // the prefixed streams (Spec.Stderr)
	bar     int       // width of the progress line on screen; 0: none
	barRank int       // the rank whose progress line shows; -1: none
	barText string    // what the progress line shows
}

func newConsole(w io.Writer) *console { return &console{w: w, barRank: -1} }

// clearBar blanks the progress line, if any, and puts the cursor at its
// start. Under mu.
func (c *console) clearBar() error {
	if c.bar == 0 {
		return nil
	}
	_, err := io.WriteString(c.w, "\r"+strings.Repeat(" ", c.bar)+"\r")
	c.bar = 0
	return err
}

// lines writes complete lines (each ending in a newline) of rank.
func (c *console) lines(rank int, b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.clearBar()
	if rank == c.barRank {
		c.barRank = -1 // its bar is done: the next to draw one shows
	}
	if _, werr := c.w.Write(b); err == nil {
		err = werr
	}
	return err
}

// progress draws line (no line end) as rank's progress line, if it is
// the one that shows.
func (c *console) progress(rank int, line string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.barRank >= 0 && rank > c.barRank {
		return nil
	}
	c.barRank = rank
	if c.bar > 0 && line == c.barText {
		return nil // drawn already (while its end was on its way)
	}
	c.barText = line
	n := utf8.RuneCountInString(line)
	out := "\r" + line
	if n < c.bar {
		out += strings.Repeat(" ", c.bar-n)
	}
	c.bar = n
	_, err := io.WriteString(c.w, out)
	return err
}

// logf returns a logger that calls logf after clearing the progress line
// (the launcher's own messages).
func (c *console) logf(logf func(string, ...any)) func(string, ...any) {
	return func(format string, args ...any) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.clearBar()
		logf(format, args...)
	}
}

// raw returns a writer that copies to w as it is, after clearing the
// progress line (rank 0's stdout).
func (c *console) raw(w io.Writer) io.Writer { return &rawWriter{c: c, w: w} }

type rawWriter struct {
	c *console
	w io.Writer
}

func (r *rawWriter) Write(p []byte) (int, error) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	r.c.clearBar()
	return r.w.Write(p)
}

// writer returns the prefixed writer of one of rank's streams.
func (c *console) writer(rank int, prefix string) *prefixWriter {
	return &prefixWriter{c: c, rank: rank, prefix: prefix}
}

// prefixWriter writes one stream of a rank to its console: whole lines,
// each with prefix, and progress updates (text ended by a carriage
// return: see console). A partial last line waits for its newline or
// carriage return, or for Flush. It is used by one goroutine at a time
// (the one exec.Cmd starts to copy a pipe).
type prefixWriter struct {
	c      *console
	rank   int
	prefix string
	buf    []byte
	// lastBar is the text of this stream's last progress update, while
	// no line followed it: a newline right after a carriage return
	// ("100%\r\n") ends the bar with that text.
	lastBar []byte
	// afterCR: the last line end was a carriage return, so the partial
	// line after it is a bar's update being drawn ("\rstep 3/10"), shown
	// at once rather than when the next update ends it.
	afterCR bool
}

// maxLine bounds a buffered partial line; a longer one is written as is.
const maxLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	p.buf = append(p.buf, b...)
	var out []byte
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		err := p.c.lines(p.rank, out)
		out = out[:0]
		return err
	}
	for {
		i := bytes.IndexAny(p.buf, "\n\r")
		if i < 0 {
			break
		}
		text := p.buf[:i]
		switch {
		case p.buf[i] == '\n':
			if i == 0 && p.lastBar != nil {
				text = p.lastBar // "...\r\n": the bar's last update is its line
			}
			out = append(append(append(out, p.prefix...), text...), '\n')
			p.lastBar, p.afterCR = nil, false
		case i == 0:
			p.afterCR = true
		default:
			// A progress update: lines before it go first.
			if err := flush(); err != nil {
				return n, err
			}
			if err := p.c.progress(p.rank, p.prefix+string(text)); err != nil {
				return n, err
			}
			p.lastBar = append(p.lastBar[:0], text...)
			p.afterCR = true
		}
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > maxLine {
		out = append(append(append(out, p.prefix...), p.buf...), '\n')
		p.buf = p.buf[:0]
	}
	if len(p.buf) == 0 {
		p.buf = nil
	}
	err := flush()
	if p.afterCR && len(p.buf) > 0 && err == nil {
		err = p.c.progress(p.rank, p.prefix+string(p.buf))
	}
	return n, err
}

// Flush writes a pending partial line, ending it with a newline.
func (p *prefixWriter) Flush() {
	if len(p.buf) == 0 {
		return
	}
	out := append(append([]byte(p.prefix), p.buf...), '\n')
	p.buf, p.lastBar, p.afterCR = nil, nil, false
	p.c.lines(p.rank, out)
}
