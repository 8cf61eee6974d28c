package train

// Reported metrics. A NaN or infinite metric (an evaluation of a model
// whose parameters blew up while staying finite, a corrupt test set) is an
// error, never a result: Run prints the event, with null for each such
// value (JSON has no NaN: encoding/json refuses the whole line), and
// returns an error naming the metrics. Writing the results out failing is
// an error too, once training and its saves are done.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
)

// writeEvent writes v, an event (a struct), to w as one JSON line, with
// null for every NaN or infinite number, and returns the JSON names of
// those (nested ones as "pipeline.bubble").
func writeEvent(w io.Writer, v any) (nonFinite []string, err error) {
	b, err := json.Marshal(v)
	var uv *json.UnsupportedValueError
	if errors.As(err, &uv) {
		var buf bytes.Buffer
		if err := encodeFinite(&buf, reflect.ValueOf(v), "", &nonFinite); err != nil {
			return nil, err
		}
		b = buf.Bytes()
	} else if err != nil {
		return nil, err
	}
	_, err = w.Write(append(b, '\n'))
	return nonFinite, err
}

// nonFiniteFields returns the JSON names of v's NaN or infinite numbers.
func nonFiniteFields(v any) []string {
	if _, err := json.Marshal(v); err == nil {
		return nil
	}
	var bad []string
	encodeFinite(io.Discard, reflect.ValueOf(v), "", &bad)
	return bad
}

// encodeFinite writes v as encoding/json would, its struct tags (name,
// omitempty, "-") included, but NaN and infinite numbers as null, adding
// their names (path) to bad.
func encodeFinite(w io.Writer, v reflect.Value, path string, bad *[]string) error {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			*bad = append(*bad, path)
			_, err := io.WriteString(w, "null")
			return err
		}
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			_, err := io.WriteString(w, "null")
			return err
		}
		return encodeFinite(w, v.Elem(), path, bad)
	}
	if v.IsValid() && v.CanInterface() {
		if b, err := json.Marshal(v.Interface()); err == nil {
			_, err := w.Write(b)
			return err
		}
	}
	switch v.Kind() {
	case reflect.Struct:
		io.WriteString(w, "{")
		first := true
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" && opts == "" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(","+opts+",", ",omitempty,") && isEmpty(fv) {
				continue
			}
			if !first {
				io.WriteString(w, ",")
			}
			first = false
			k, _ := json.Marshal(name)
			w.Write(k)
			io.WriteString(w, ":")
			sub := name
			if path != "" {
				sub = path + "." + name
			}
			if err := encodeFinite(w, fv, sub, bad); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "}")
		return err
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			_, err := io.WriteString(w, "null")
			return err
		}
		io.WriteString(w, "[")
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				io.WriteString(w, ",")
			}
			if err := encodeFinite(w, v.Index(i), fmt.Sprintf("%s[%d]", path, i), bad); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "]")
		return err
	}
	return fmt.Errorf("train: cannot encode %s (%s) as JSON", path, v.Type())
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// metricError is the error of a run that reported the non-finite metrics
// bad in what ("epoch 2", "step 300", "the summary"); note says what
// became of the checkpoint ("" for nothing).
func metricError(what string, bad []string, note string) error {
	verb := " are"
	if len(bad) == 1 {
		verb = " is"
	}
	if note != "" {
		note = ". " + note
	}
	return fmt.Errorf("%w at %s: %s%s not finite (the parameters blew up: lower -lr; or the data holds NaN or Inf)%s",
		ErrDiverged, what, strings.Join(bad, ", "), verb, note)
}

// errWriter passes writes on to w and keeps the first error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}
