package store

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// SealKey is one key of [Seal]: an AES key and the id that names it in
// every response it seals.
type SealKey struct {
	// ID names the key in the records it seals, so that the right key
	// opens them after a rotation: 1 to 64 printable ASCII characters
	// without spaces (letters, digits, punctuation), unique among the keys
	// given to Seal, for example "2025-q4". It is stored in plain text in
	// every sealed record.
	ID string

	// Secret is the AES key: 16, 24 or 32 random bytes (AES-128, AES-192
	// or AES-256), not all zero. Seal keeps no reference to it.
	Secret []byte
}

// ErrUnsealable is matched (errors.Is) by a Claim or Get that found a
// response Seal cannot open: sealed with a key id that is not among the
// keys given, altered or moved from another record, or not sealed at all.
// The error's code is Internal, and its message says which of these it is,
// naming the key id (never the record key or any key material).
var ErrUnsealable = errors.New("store: the recorded response cannot be opened")

// maxSealKeyID is the longest key id Seal accepts.
const maxSealKeyID = 64

// sealMagic starts every sealed response: three marker bytes (the first
// outside ASCII, so that no text response starts with them) and the
// envelope's version.
const sealMagic = "\x89IKS\x01"

// Seal returns a [Store] that encrypts every response it writes to s with
// AES-GCM under current, and opens the responses it reads with any of the
// keys given (current and older): the recorded responses (card numbers,
// e-mail addresses, tokens) never sit in plain text on the backend. It
// works on every store, the composed one included.
//
// What is sealed: the non-empty response of every outcome Complete writes,
// and nothing else. Record keys stay readable for operators, the
// fingerprint is a hash already, and the state, fence and times are the
// store's own. An empty response stays empty (there is nothing to hide).
// Each response is sealed under a fresh random 96-bit nonce with the
// record key and the fingerprint as additional authenticated data, so a
// sealed response copied under another key, or to a record of another
// request, does not open. The envelope is, in order: 5 bytes of marker and
// version ("\x89IKS" and 1), one byte of key id length, the key id, the
// 12-byte nonce, and the ciphertext with its 16-byte tag; the additional
// data is the envelope up to the nonce, then the record key and the
// fingerprint, each behind its length as 4 bytes big-endian. It adds 34 bytes
// plus the key id's length to each response, so a response within that
// margin of a backend's limit no longer fits: Complete then fails with
// [ErrTooLarge], and the guard records such an outcome as executed but not
// replayable.
//
// Claim (when it returns an outcome) and Get open the response. A response
// sealed under a key id that is not among the keys given, one that fails
// authentication (altered, moved, or sealed under another secret with the
// same id), and a non-empty response that is not sealed at all (written
// before sealing was turned on) are never returned as they are: Claim and
// Get fail with an Internal error that matches [ErrUnsealable], and return
// no record. The guard, which cannot tell then whether its work already
// ran, answers unavailable and does not run it. Extend, Release and Delete
// pass through: an operator can still delete a record that no longer
// opens.
//
// Rotation: give the new key as an older key on every node first, then
// make it current (and the old one older) everywhere; drop the old key
// once the record TTL has passed since the last response it sealed. A key
// may seal at most 2^32 responses (the bound of random nonces): rotate
// well before that.
//
// Seal validates its keys and returns an InvalidArgument error for a nil
// store or a bad key; the messages never contain key material. When s is a
// [Watcher], so is the sealed store; when s is a [Transactor], its work
// commits sealed responses.
func Seal(s Store, current SealKey, older ...SealKey) (Store, error) {
	if s == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "seal", "store must not be nil", nil)
	}
	ss := &sealed{next: s, keys: make(map[string]cipher.AEAD, 1+len(older))}
	for i, k := range append([]SealKey{current}, older...) {
		name := "the current key"
		if i > 0 {
			name = fmt.Sprintf("older key %d", i)
		}
		aead, err := sealCipher(name, k, ss.keys)
		if err != nil {
			return nil, err
		}
		ss.keys[k.ID] = aead
	}
	ss.header = append([]byte(sealMagic), byte(len(current.ID)))
	ss.header = append(ss.header, current.ID...)
	ss.current = ss.keys[current.ID]
	if w, ok := s.(Watcher); ok {
		return &watchingSealed{sealed: ss, watcher: w}, nil
	}
	return ss, nil
}

// watchingSealed is the Store Seal returns for a store that notifies: a
// [Watcher] through it (notifications carry no response).
type watchingSealed struct {
	*sealed
	watcher Watcher
}

// Watch implements [Watcher] with the sealed store's watch.
func (s *watchingSealed) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return s.watcher.Watch(ctx, key)
}

// sealCipher validates k, named name in messages, against the keys already
// taken, and returns its AEAD.
func sealCipher(name string, k SealKey, taken map[string]cipher.AEAD) (cipher.AEAD, error) {
	bad := func(detail string) error {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "seal", name+": "+detail, nil)
	}
	if !validSealKeyID(k.ID) {
		return nil, bad(fmt.Sprintf("key id must be 1 to %d printable ASCII characters without spaces (got %d bytes)", maxSealKeyID, len(k.ID)))
	}
	if _, dup := taken[k.ID]; dup {
		return nil, bad(fmt.Sprintf("key id %q is given twice", k.ID))
	}
	switch len(k.Secret) {
	case 16, 24, 32:
	default:
		return nil, bad(fmt.Sprintf("secret of key id %q has %d bytes; want 16, 24 or 32 (AES-128, AES-192 or AES-256)", k.ID, len(k.Secret)))
	}
	zero := true
	for _, b := range k.Secret {
		zero = zero && b == 0
	}
	if zero {
		return nil, bad(fmt.Sprintf("secret of key id %q is all zero bytes; want random bytes", k.ID))
	}
	block, err := aes.NewCipher(k.Secret)
	if err != nil {
		return nil, bad(fmt.Sprintf("secret of key id %q is not an AES key", k.ID))
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, bad(fmt.Sprintf("secret of key id %q cannot be used with GCM", k.ID))
	}
	return aead, nil
}

// validSealKeyID reports whether id is 1 to maxSealKeyID bytes of
// printable ASCII without spaces.
func validSealKeyID(id string) bool {
	if id == "" || len(id) > maxSealKeyID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// sealed is the Store Seal returns.
type sealed struct {
	next    Store
	keys    map[string]cipher.AEAD // by key id; read-only after Seal
	current cipher.AEAD
	header  []byte // the envelope's start under the current key: magic, version, id length, id
}

func (s *sealed) Claim(ctx context.Context, key, fp string, ttl time.Duration) (Record, bool, error) {
	rec, claimed, err := s.next.Claim(ctx, key, fp, ttl)
	if err != nil {
		return rec, claimed, err
	}
	if rec, err = s.open("claim", key, rec); err != nil {
		return Record{}, false, err
	}
	return rec, claimed, nil
}

func (s *sealed) Extend(ctx context.Context, key string, fence lock.Fence, ttl time.Duration) (bool, error) {
	return s.next.Extend(ctx, key, fence, ttl)
}

func (s *sealed) Complete(ctx context.Context, rec Record, ttl time.Duration) (bool, error) {
	// Nothing is sealed for a call that is refused anyway.
	if err := ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, "complete"); err != nil {
		return false, err
	}
	if len(rec.Response) > 0 {
		rec.Response = s.seal(rec.Key, rec.Fingerprint, rec.Response)
	}
	return s.next.Complete(ctx, rec, ttl)
}

// Work implements [Transactor]: the work of the sealed store, whose
// commit seals the response as Complete does (a nil Work when the sealed
// store is no Transactor).
func (s *sealed) Work(ctx context.Context, key string, fence lock.Fence) (context.Context, Work) {
	t, ok := s.next.(Transactor)
	if !ok {
		return ctx, nil
	}
	ctx, w := t.Work(ctx, key, fence)
	if w == nil {
		return ctx, nil
	}
	return ctx, &sealedWork{Work: w, s: s}
}

// sealedWork is the work of a sealed store.
type sealedWork struct {
	Work
	s *sealed
}

func (w *sealedWork) Commit(ctx context.Context, rec Record, ttl time.Duration) (bool, error) {
	if err := ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if len(rec.Response) > 0 {
		rec.Response = w.s.seal(rec.Key, rec.Fingerprint, rec.Response)
	}
	return w.Work.Commit(ctx, rec, ttl)
}

func (s *sealed) Release(ctx context.Context, key string, fence lock.Fence) (bool, error) {
	return s.next.Release(ctx, key, fence)
}

func (s *sealed) Get(ctx context.Context, key string) (Record, bool, error) {
	rec, ok, err := s.next.Get(ctx, key)
	if err != nil || !ok {
		return rec, ok, err
	}
	if rec, err = s.open("get", key, rec); err != nil {
		return Record{}, false, err
	}
	return rec, true, nil
}

func (s *sealed) Delete(ctx context.Context, key string) (bool, error) {
	return s.next.Delete(ctx, key)
}

// seal returns the envelope of response under the current key, for the
// record key and fingerprint fp.
func (s *sealed) seal(key, fp string, response []byte) []byte {
	env := make([]byte, len(s.header), len(s.header)+s.current.Overhead()+len(response))
	copy(env, s.header)
	return s.current.Seal(env, nil, response, sealAAD(s.header, key, fp))
}

// open returns rec with its response opened; key is the record key the
// caller asked for. A record without a response is returned as it is.
func (s *sealed) open(op, key string, rec Record) (Record, error) {
	if len(rec.Response) == 0 {
		return rec, nil
	}
	plain, err := s.openResponse(op, key, rec.Fingerprint, rec.Response)
	if err != nil {
		return Record{}, err
	}
	rec.Response = plain
	return rec, nil
}

// openResponse opens the envelope env of the record key and fingerprint
// fp. Its errors match ErrUnsealable and never name the record key.
func (s *sealed) openResponse(op, key, fp string, env []byte) ([]byte, error) {
	fail := func(detail string) error {
		return idemkit.NewError(idemkit.CodeInternal, op, detail, ErrUnsealable)
	}
	if len(env) < len(sealMagic) || string(env[:len(sealMagic)-1]) != sealMagic[:len(sealMagic)-1] {
		return nil, fail("the record's response is not sealed (written before sealing was turned on, or by a store without it); " +
			"it is not replayed, and the key stays taken until the record expires or an operator deletes it")
	}
	if env[len(sealMagic)-1] != sealMagic[len(sealMagic)-1] {
		return nil, fail(fmt.Sprintf("the record's response is sealed in envelope version %d, which this version of the store cannot read", env[len(sealMagic)-1]))
	}
	rest := env[len(sealMagic):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0])+s.current.Overhead() {
		return nil, fail("the record's sealed response is truncated")
	}
	id := string(rest[1 : 1+int(rest[0])])
	if !validSealKeyID(id) {
		return nil, fail("the record's sealed response is malformed (its key id is not a valid one)")
	}
	aead := s.keys[id]
	if aead == nil {
		return nil, fail(fmt.Sprintf("record sealed with key id %q, which is not among the keys given: add it back to the older keys until its records expire", id))
	}
	header := env[:len(sealMagic)+1+len(id)]
	plain, err := aead.Open(nil, nil, env[len(header):], sealAAD(header, key, fp))
	if err != nil {
		return nil, fail(fmt.Sprintf("record sealed with key id %q failed authentication: its response was altered, moved from another key or request, "+
			"or sealed under another secret with the same key id", id))
	}
	if plain == nil {
		plain = []byte{} // an empty response sealed by another writer: still a response
	}
	return plain, nil
}

// sealAAD returns the additional authenticated data of a sealed response:
// its envelope's header, then the record key and the fingerprint, each
// behind its length.
func sealAAD(header []byte, key, fp string) []byte {
	aad := make([]byte, 0, len(header)+8+len(key)+len(fp))
	aad = append(aad, header...)
	aad = binary.BigEndian.AppendUint32(aad, uint32(len(key)))
	aad = append(aad, key...)
	aad = binary.BigEndian.AppendUint32(aad, uint32(len(fp)))
	return append(aad, fp...)
}
