package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// checkKeys refuses what encoding/json lets through but no schema allows:
// a key spelled in another case than the field it would fill (encoding/json
// matches names case-insensitively, so "DL" would fill dl), a key twice in
// one object (encoding/json keeps the last, so the payload would mean what
// a reader keeping the first does not), and null (no schema allows it, and
// encoding/json turns it into a missing value). names are the JSON names of
// the target type's fields. data has passed the size and depth checks.
func checkKeys(data []byte, names map[string]bool) error {
	type frame struct {
		object, wantKey bool
		seen            map[string]bool
	}
	var stack []*frame
	done := func() { // a value of the innermost container is complete
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			top := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				done()
				continue
			}
			key, _ := tok.(string)
			if top.seen[key] {
				return fmt.Errorf("%w: key %q twice in one object", ErrInvalid, key)
			}
			top.seen[key] = true
			if !names[key] {
				for name := range names {
					if strings.EqualFold(name, key) {
						return fmt.Errorf("%w: key %q: keys are case-sensitive (%q)", ErrInvalid, key, name)
					}
				}
			}
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantKey: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		case nil:
			return fmt.Errorf("%w: null is not a value of any key", ErrInvalid)
		}
		done()
	}
}

// fieldNames returns the JSON names of the tagged fields of t and of the
// types it contains (struct fields, pointers, maps, slices), except types
// that decode themselves.
func fieldNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	seen := map[reflect.Type]bool{}
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Map || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || reflect.PointerTo(t).Implements(unmarshaler) {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				names[name] = true
			}
			walk(f.Type)
		}
	}
	walk(t)
	return names
}
