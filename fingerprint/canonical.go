package fingerprint

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of arrays and objects accepted.
const maxDepth = 1000

// errInvalidJSON is matched by every refusal of the canonicaliser.
var errInvalidJSON = errors.New("fingerprint: invalid JSON")

// syntaxError is input the canonicaliser refuses. Its message never quotes
// the input beyond a single byte.
type syntaxError struct {
	Offset int64  // byte offset in the input at which the problem was found
	Msg    string // what is wrong
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("fingerprint: invalid JSON at offset %d: %s", e.Offset, e.Msg)
}

func (e *syntaxError) Unwrap() error { return errInvalidJSON }

// canon is the canonicaliser: a recursive-descent parser over the input that
// writes the canonical form as it goes, objects first in input order.
//
// A small object whose members are out of order is rewritten in place as it
// closes. Larger ones are recorded (objects and spans) and, if there are
// any, the document is emitted once more, in order, into scratch: a byte
// inside large objects is copied at most twice, however deep the nesting,
// where rewriting every object in place would copy it once per enclosing
// object.
type canon struct {
	in    []byte
	pos   int
	out   []byte
	depth int

	// members is a stack: each open object owns members[base:], and an
	// inner object's entries are popped before its parent records another.
	members []member
	// keys holds the decoded names of members whose names had escapes,
	// with the same stack discipline as members; other names point into
	// the input.
	keys []byte

	// objects lists, in the order they open, the objects still open and,
	// once closed, the large ones whose members were out of order and the
	// objects enclosing those; the others are dropped as they close.
	objects []object
	// spans holds the members of out-of-order objects, in canonical order.
	spans []span
	// moved is whether some recorded object's members are out of order.
	moved   bool
	scratch []byte
	// folds and group are keepFoldOrder's scratch space.
	folds []int
	group []member
	// inPlaceMax: see the constant.
	inPlaceMax int
}

// object is an object written to out[start:end], braces included. next is
// the index in objects past its descendants. If its members are out of
// order they are spans[first:first+count] in canonical order; count is 0
// otherwise.
type object struct{ start, end, next, first, count int }

// span is a member's text ("name":value) in out[start:end]; obj is the
// index in objects of the first object recorded at or after start.
type span struct{ start, end, obj int }

// member is one object member already written to out. It holds no
// pointers, which keeps the stack cheap to grow and to sort.
type member struct {
	// The decoded name is in[name:nameEnd], or keys[^name:nameEnd] when
	// name < 0 (a name with escapes).
	name, nameEnd int
	// The member's text ("name":value) in out. The members of an object
	// are written one after the other, so start grows with input order.
	start, end int
	obj        int // len(objects) when the member began
	off        int // input offset of the name, for errors
}

func (c *canon) key(m *member) []byte {
	if m.name < 0 {
		return c.keys[^m.name:m.nameEnd]
	}
	return c.in[m.name:m.nameEnd]
}

// appendCanonical appends the canonical form of data to dst. On error the
// returned slice holds dst plus partial output; callers truncate it.
//
// The result may use a different array than dst (the canonicaliser's
// scratch buffer, which then takes dst's array in exchange); its first
// len(dst) bytes are dst's.
func (c *canon) appendCanonical(dst, data []byte) ([]byte, error) {
	return c.appendCanonicalMode(dst, data, inPlaceMax)
}

// inPlaceMax is the size in bytes up to which an object whose members are
// out of order is rewritten in place when it closes, rather than recorded
// for a final in-order pass. Rewriting in place copies a byte once per
// enclosing small object, at most about inPlaceMax/12 times (each nesting
// level takes a dozen bytes or more); the final pass copies every byte once
// but costs records. Small objects, the common case (an array of thousands
// of items, say), are thus never recorded.
const inPlaceMax = 512

// appendCanonicalMode is appendCanonical with the in-place threshold as a
// parameter, so that tests can exercise both ways of ordering members.
func (c *canon) appendCanonicalMode(dst, data []byte, inPlace int) ([]byte, error) {
	base := len(dst)
	dst = slices.Grow(dst, len(data)) // the canonical form is rarely longer
	c.inPlaceMax = inPlace
	c.in, c.pos, c.out, c.depth = data, 0, dst, 0
	c.members, c.keys = c.members[:0], c.keys[:0]
	c.objects, c.spans, c.moved = c.objects[:0], c.spans[:0], false
	err := c.document()
	if err == nil && c.moved {
		res := append(c.scratch[:0], c.out[:base]...)
		res = c.emitRange(res, base, len(c.out), 0)
		c.scratch, c.out = c.out, res
	}
	out := c.out
	c.in, c.out = nil, nil
	return out, err
}

// emitRange appends out[lo:hi] to dst with the members of every
// out-of-order object in it put in order; objects[i] is the first recorded
// object at or after lo.
func (c *canon) emitRange(dst []byte, lo, hi, i int) []byte {
	for {
		for i < len(c.objects) && c.objects[i].start < hi && c.objects[i].count == 0 {
			i++ // in order: its descendants come next
		}
		if i == len(c.objects) || c.objects[i].start >= hi {
			return append(dst, c.out[lo:hi]...)
		}
		o := c.objects[i]
		dst = append(dst, c.out[lo:o.start]...)
		dst = append(dst, '{')
		for j, sp := range c.spans[o.first : o.first+o.count] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = c.emitRange(dst, sp.start, sp.end, sp.obj)
		}
		dst = append(dst, '}')
		lo, i = o.end, o.next
	}
}

func (c *canon) document() error {
	c.skipSpace()
	if err := c.value(); err != nil {
		return err
	}
	c.skipSpace()
	if c.pos < len(c.in) {
		return c.fail(c.pos, "trailing data after the JSON value")
	}
	return nil
}

func (c *canon) fail(off int, msg string) error {
	return &syntaxError{Offset: int64(off), Msg: msg}
}

func (c *canon) unexpected(what string) error {
	if c.pos >= len(c.in) {
		return c.fail(c.pos, "unexpected end of input "+what)
	}
	return c.fail(c.pos, "invalid character "+quoteByte(c.in[c.pos])+" "+what)
}

// quoteByte quotes a single input byte for an error message.
func quoteByte(b byte) string {
	if b < utf8.RuneSelf {
		return strconv.QuoteRune(rune(b))
	}
	return fmt.Sprintf("'\\x%02x'", b)
}

func (c *canon) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value() error {
	if c.pos >= len(c.in) {
		return c.unexpected("looking for the beginning of a value")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		return c.array()
	case ch == '"':
		return c.stringValue()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	case ch == '-' || '0' <= ch && ch <= '9':
		return c.number()
	}
	return c.unexpected("looking for the beginning of a value")
}

func (c *canon) literal(lit string) error {
	if len(c.in)-c.pos < len(lit) || string(c.in[c.pos:c.pos+len(lit)]) != lit {
		return c.fail(c.pos, "invalid literal (expected "+lit+")")
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

func (c *canon) enter() error {
	c.depth++
	if c.depth > maxDepth {
		return c.fail(c.pos, "nesting deeper than "+strconv.Itoa(maxDepth)+" levels")
	}
	return nil
}

func (c *canon) array() error {
	if err := c.enter(); err != nil {
		return err
	}
	c.pos++
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		c.depth--
		return nil
	}
	for {
		if err := c.value(); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return c.unexpected("after an array element")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
			c.skipSpace()
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			c.depth--
			return nil
		default:
			return c.unexpected("after an array element (expected ',' or ']')")
		}
	}
}

func (c *canon) object() error {
	if err := c.enter(); err != nil {
		return err
	}
	idx := len(c.objects)
	c.objects = append(c.objects, object{start: len(c.out)})
	c.pos++
	c.out = append(c.out, '{')
	base, keysBase := len(c.members), len(c.keys)
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		c.objects = c.objects[:idx]
		c.depth--
		return nil
	}
	for {
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.unexpected("looking for an object member name")
		}
		m := member{off: c.pos, start: len(c.out), obj: len(c.objects)}
		c.pos++
		start := c.pos
		escaped, err := c.scanString()
		if err != nil {
			return err
		}
		end := c.pos
		c.pos++
		if escaped {
			k := len(c.keys)
			c.keys = unescape(c.keys, c.in[start:end])
			m.name, m.nameEnd = ^k, len(c.keys)
			c.out = appendString(c.out, c.keys[k:])
		} else {
			m.name, m.nameEnd = start, end
			c.out = append(c.out, c.in[start-1:end+1]...)
		}
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.unexpected("after an object member name (expected ':')")
		}
		c.pos++
		c.out = append(c.out, ':')
		c.skipSpace()
		if err := c.value(); err != nil {
			return err
		}
		m.end = len(c.out)
		c.members = append(c.members, m)
		c.skipSpace()
		if c.pos >= len(c.in) {
			return c.unexpected("after an object member")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			c.out = append(c.out, ',')
			c.skipSpace()
			continue
		}
		if c.in[c.pos] != '}' {
			return c.unexpected("after an object member (expected ',' or '}')")
		}
		c.pos++
		break
	}
	c.out = append(c.out, '}')
	if err := c.closeObject(idx, c.members[base:]); err != nil {
		return err
	}
	c.members, c.keys = c.members[:base], c.keys[:keysBase]
	c.depth--
	return nil
}

// closeObject refuses duplicate member names and puts the members of the
// object just written, objects[idx], in order. An object in order with
// nothing recorded inside it needs no record and is dropped. A small object
// out of order is rewritten in place (see inPlaceMax); a larger one keeps
// its record, with its members' spans in canonical order, for emitRange.
func (c *canon) closeObject(idx int, ms []member) error {
	sorted := true
	for i := 1; i < len(ms) && sorted; i++ {
		r := compareUTF16(c.key(&ms[i-1]), c.key(&ms[i]))
		if r == 0 {
			return c.fail(ms[i].off, "duplicate object member name")
		}
		sorted = r < 0
	}
	leaf := len(c.objects) == idx+1 // nothing recorded inside
	if sorted && leaf {
		c.objects = c.objects[:idx]
		return nil
	}
	o := &c.objects[idx]
	o.end, o.next = len(c.out), len(c.objects)
	if sorted {
		return nil
	}
	if len(ms) <= 12 {
		// Insertion sort: fewer comparisons and moves than a general sort
		// for the small objects requests are made of.
		for i := 1; i < len(ms); i++ {
			m := ms[i]
			k := c.key(&m)
			j := i
			for ; j > 0 && compareUTF16(c.key(&ms[j-1]), k) > 0; j-- {
				ms[j] = ms[j-1]
			}
			ms[j] = m
		}
	} else {
		slices.SortFunc(ms, func(a, b member) int { return compareUTF16(c.key(&a), c.key(&b)) })
	}
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(c.key(&ms[i-1]), c.key(&ms[i])) {
			return c.fail(max(ms[i-1].off, ms[i].off), "duplicate object member name")
		}
	}
	c.keepFoldOrder(ms)
	if leaf && o.end-o.start <= c.inPlaceMax {
		// Nothing inside is recorded (objects inside are smaller still, so
		// were put in order in place), and no record covers this range.
		bodyStart := o.start + 1
		c.scratch = append(c.scratch[:0], c.out[bodyStart:o.end-1]...)
		c.out = c.out[:bodyStart]
		for i, m := range ms {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.scratch[m.start-bodyStart:m.end-bodyStart]...)
		}
		c.out = append(c.out, '}')
		c.objects = c.objects[:idx]
		return nil
	}
	o.first, o.count = len(c.spans), len(ms)
	for _, m := range ms {
		c.spans = append(c.spans, span{m.start, m.end, m.obj})
	}
	c.moved = true
	return nil
}

// keepFoldOrder puts back in input order, on the places the sort by name
// gave them, the members of ms (sorted by name, no two names equal) whose
// names are equal under encoding/json's case-insensitive matching (see
// compareFold): a Go handler reads the last of those, so their order is
// part of what the object says. Names such as "amount" and "Amount" (or
// "s" and "\u017f") thus keep their order, every other member is sorted.
//
// The places a set of such members takes depend only on the object's
// names, and their order on these places only on their input order, so
// the result is canonical: two objects get the same one exactly when they
// differ only in the order of members whose names do not match alike. It
// is its own canonical form: sorted, so left as it is.
func (c *canon) keepFoldOrder(ms []member) {
	// The places of ms, sorted stably by folded name: each set of
	// matching names is a run, listing its places in order.
	folds := c.folds[:0]
	for i := range ms {
		folds = append(folds, i)
	}
	byFold := func(i, j int) int { return compareFold(c.key(&ms[i]), c.key(&ms[j])) }
	if len(folds) <= 12 {
		for i := 1; i < len(folds); i++ {
			for j := i; j > 0 && byFold(folds[j-1], folds[j]) > 0; j-- {
				folds[j-1], folds[j] = folds[j], folds[j-1]
			}
		}
	} else {
		slices.SortStableFunc(folds, byFold)
	}
	for lo := 0; lo < len(folds); {
		hi := lo + 1
		for hi < len(folds) && byFold(folds[lo], folds[hi]) == 0 {
			hi++
		}
		if hi-lo > 1 {
			group := c.group[:0]
			for _, p := range folds[lo:hi] {
				group = append(group, ms[p])
			}
			slices.SortFunc(group, func(a, b member) int { return cmp.Compare(a.start, b.start) })
			for k, p := range folds[lo:hi] {
				ms[p] = group[k]
			}
			c.group = group
		}
		lo = hi
	}
	c.folds = folds
}

// compareFold orders two valid UTF-8 names by their folded forms as
// encoding/json folds member names to match them to struct fields: it
// returns 0 exactly when encoding/json matches them alike (bytes.EqualFold
// reports them equal: the same length in runes, each pair of runes in one
// orbit of unicode.SimpleFold, such as k, K and U+212A KELVIN SIGN, or s, S
// and U+017F LATIN SMALL LETTER LONG S; simple folding only, so "ß" is not
// "ss").
func compareFold(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		ra, rb := rune(a[0]), rune(b[0])
		na, nb := 1, 1
		if ra < utf8.RuneSelf {
			ra = foldASCII(ra)
		} else {
			ra, na = utf8.DecodeRune(a)
			ra = foldRune(ra)
		}
		if rb < utf8.RuneSelf {
			rb = foldASCII(rb)
		} else {
			rb, nb = utf8.DecodeRune(b)
			rb = foldRune(rb)
		}
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// foldASCII folds an ASCII letter to upper case, as encoding/json does.
func foldASCII(r rune) rune {
	if 'a' <= r && r <= 'z' {
		r -= 'a' - 'A'
	}
	return r
}

// foldRune returns the smallest rune of r's orbit under unicode.SimpleFold,
// as encoding/json folds a non-ASCII rune (for ASCII, foldASCII's result).
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units,
// as RFC 8785 orders member names. UTF-8 byte order is code point order, and
// the two orders differ only between a supplementary character (a surrogate
// pair, D800 to DBFF first) and a BMP character from U+E000 up.
func compareUTF16(a, b []byte) int {
	// Names usually differ in their first byte, often ASCII.
	if len(a) > 0 && len(b) > 0 && a[0] != b[0] && a[0]|b[0] < utf8.RuneSelf {
		return cmp.Compare(a[0], b[0])
	}
	return compareUTF16Slow(a, b)
}

func compareUTF16Slow(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	if a[i] < utf8.RuneSelf || b[i] < utf8.RuneSelf {
		return cmp.Compare(a[i], b[i])
	}
	// Both bytes belong to multi-byte sequences that start at the same
	// offset (the common prefix decodes alike): back up to it and decode.
	j := i
	for j > 0 && !utf8.RuneStart(a[j]) {
		j--
	}
	ra, _ := utf8.DecodeRune(a[j:])
	rb, _ := utf8.DecodeRune(b[j:])
	if (ra >= 0x10000) == (rb >= 0x10000) {
		return cmp.Compare(ra, rb)
	}
	return cmp.Compare(firstUnit(ra), firstUnit(rb))
}

// firstUnit returns the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

// plain marks the bytes a string may hold that need no attention: printable
// ASCII other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString validates a string whose opening quote is just behind c.pos and
// leaves c.pos at the closing quote. It reports whether the string holds
// escapes; a string without escapes is its own canonical form.
func (c *canon) scanString() (escaped bool, err error) {
	in, i := c.in, c.pos
	for {
		for i < len(in) && plain[in[i]] {
			i++
		}
		if i >= len(in) {
			c.pos = i
			return false, c.fail(i, "unterminated string")
		}
		switch ch := in[i]; {
		case ch == '"':
			c.pos = i
			return escaped, nil
		case ch == '\\':
			n, err := c.checkEscape(i)
			if err != nil {
				return false, err
			}
			escaped = true
			i += n
		case ch < 0x20:
			return false, c.fail(i, "control character in string (must be escaped)")
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				return false, c.fail(i, "invalid UTF-8 in string")
			}
			i += size
		}
	}
}

// checkEscape validates the escape sequence at in[i] (a backslash) and
// returns its length: 2, 6, or 12 for a surrogate pair.
func (c *canon) checkEscape(i int) (int, error) {
	in := c.in
	if i+1 >= len(in) {
		return 0, c.fail(i, "unterminated string")
	}
	switch in[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
	default:
		return 0, c.fail(i, "invalid escape sequence")
	}
	r, ok := hex4(in[i+2:])
	if !ok {
		return 0, c.fail(i, "invalid \\u escape (expected 4 hex digits)")
	}
	switch {
	case r < 0xD800 || r > 0xDFFF:
		return 6, nil
	case r >= 0xDC00:
		return 0, c.fail(i, "lone low surrogate escape")
	}
	if i+7 >= len(in) || in[i+6] != '\\' || in[i+7] != 'u' {
		return 0, c.fail(i, "lone high surrogate escape")
	}
	lo, ok := hex4(in[i+8:])
	if !ok {
		return 0, c.fail(i+6, "invalid \\u escape (expected 4 hex digits)")
	}
	if lo < 0xDC00 || lo > 0xDFFF {
		return 0, c.fail(i, "lone high surrogate escape")
	}
	return 12, nil
}

// hex4 decodes four hex digits (either case) at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, ch := range b[:4] {
		var d byte
		switch {
		case '0' <= ch && ch <= '9':
			d = ch - '0'
		case 'a' <= ch && ch <= 'f':
			d = ch - 'a' + 10
		case 'A' <= ch && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// unescape appends the decoded form of raw, the contents of a string that
// scanString accepted, to dst.
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			return append(dst, raw[i:]...)
		}
		dst = append(dst, raw[i:i+j]...)
		i += j
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(raw[i+2:])
			if r >= 0xD800 && r < 0xDC00 {
				lo, _ := hex4(raw[i+8:])
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			i += 6
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

// appendString appends s, valid UTF-8, as a canonical JSON string.
func appendString(dst, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i, ch := range s {
		if ch >= 0x20 && ch != '"' && ch != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch ch {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[ch>>4], hexDigits[ch&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func (c *canon) stringValue() error {
	c.pos++
	start := c.pos
	escaped, err := c.scanString()
	if err != nil {
		return err
	}
	end := c.pos
	c.pos++
	if !escaped {
		c.out = append(c.out, c.in[start-1:end+1]...)
		return nil
	}
	mark := len(c.keys)
	c.keys = unescape(c.keys, c.in[start:end])
	c.out = appendString(c.out, c.keys[mark:])
	c.keys = c.keys[:mark]
	return nil
}

func isDigit(ch byte) bool { return '0' <= ch && ch <= '9' }

func (c *canon) number() error {
	in, start := c.in, c.pos
	i := start
	if in[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && '1' <= in[i] && in[i] <= '9':
		for i++; i < len(in) && isDigit(in[i]); i++ {
		}
	default:
		c.pos = i
		return c.unexpected("in a number (expected a digit)")
	}
	intEnd := i
	fracEnd := i // fraction digits in[intEnd+1:fracEnd], if any
	if i < len(in) && in[i] == '.' {
		i++
		d := i
		for i < len(in) && isDigit(in[i]) {
			i++
		}
		if i == d {
			c.pos = i
			return c.unexpected("after a decimal point (expected a digit)")
		}
		fracEnd = i
	}
	expStart := i // exponent sign and digits in[expStart+1:i], if any
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		d := i
		for i < len(in) && isDigit(in[i]) {
			i++
		}
		if i == d {
			c.pos = i
			return c.unexpected("in an exponent (expected a digit)")
		}
	}
	c.pos = i
	lit := in[start:i]
	// Fast paths: literals that already are their canonical form.
	switch {
	case i == intEnd && intEnd-intStart <= maxPlainZeros+1:
		// An integer of at most 21 digits ends in at most 20 zeros.
		if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
			lit = lit[1:] // -0
		}
		c.out = append(c.out, lit...)
		return nil
	case i == fracEnd && fracEnd > intEnd && plainDecimal(lit, intEnd-start):
		c.out = append(c.out, lit...)
		return nil
	}
	var frac []byte
	if fracEnd > intEnd {
		frac = in[intEnd+1 : fracEnd]
	}
	var exp int64
	if i > expStart {
		exp = parseExponent(in[expStart+1 : i])
	}
	out, ok := appendDecimal(c.out, start < intStart, in[intStart:intEnd], frac, exp)
	if !ok {
		return c.fail(start, "number out of range (in scientific notation its exponent exceeds "+
			strconv.Itoa(maxExponent)+" in magnitude)")
	}
	c.out = out
	return nil
}
