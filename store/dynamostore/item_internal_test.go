package dynamostore

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// TestEncodeKey: a UTF-8 key not starting with "#" is its own partition
// key; any other is "#" and its base64url, which decodes back; no two
// keys share one, and the longest key's fits DynamoDB's 2,048 bytes.
func TestEncodeKey(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct {
		key      string
		verbatim bool
	}{
		{"order-1", true}, {"a/b", true}, {"caf\u00e9", true}, {"\x00", true}, {strings.Repeat("k", 1024), true},
		{"#", false}, {"#b3JkZXItMQ", false}, {"\xff", false}, {"order-1\xff", false}, {strings.Repeat("\xff", 1024), false},
	} {
		key := tc.key
		pk := encodeKey(key)
		if tc.verbatim != (pk == key) {
			t.Errorf("encodeKey(%q) = %q; want verbatim %v", key, pk, tc.verbatim)
		}
		if back, ok := decodeKey(pk); !ok || back != key {
			t.Errorf("decodeKey(encodeKey(%q)) = %q, %v", key, back, ok)
		}
		if other, dup := seen[pk]; dup {
			t.Errorf("%q and %q share the partition key %q", key, other, pk)
		}
		seen[pk] = key
		if len(pk) > 2048 {
			t.Errorf("the partition key of a %d-byte key is %d bytes", len(key), len(pk))
		}
	}
}

// TestDecodeSteps: an item's steps come back in order, a result absent
// from the item as none; an sp and sc that disagree, a step that is not
// a map of a name and a binary result, are reported as a malformed item
// (Internal), never trusted.
func TestDecodeSteps(t *testing.T) {
	base := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			attrKey: &types.AttributeValueMemberS{Value: "k"}, attrState: num(1), attrFence: num(5), attrExpires: num(9),
		}
	}
	m := base()
	m[attrSteps] = &types.AttributeValueMemberL{Value: []types.AttributeValue{
		stepValue(store.Step{Name: "a", Result: []byte{0, 1}}).(*types.AttributeValueMemberL).Value[0],
		stepValue(store.Step{Name: "b"}).(*types.AttributeValueMemberL).Value[0],
	}}
	m[attrStepCount] = num(2)
	it, err := decode("get", "k", m)
	if err != nil {
		t.Fatal(err)
	}
	if got := it.record().Steps; len(got) != 2 || got[0].Name != "a" || string(got[0].Result) != "\x00\x01" || got[1].Name != "b" || got[1].Result != nil {
		t.Fatalf("steps %+v", got)
	}
	for what, change := range map[string]func(map[string]types.AttributeValue){
		"sc without sp":   func(m map[string]types.AttributeValue) { delete(m, attrSteps) },
		"sp without sc":   func(m map[string]types.AttributeValue) { delete(m, attrStepCount) },
		"sc not the size": func(m map[string]types.AttributeValue) { m[attrStepCount] = num(3) },
		"sp not a list":   func(m map[string]types.AttributeValue) { m[attrSteps] = &types.AttributeValueMemberS{Value: "x"} },
		"a step not a map": func(m map[string]types.AttributeValue) {
			m[attrSteps].(*types.AttributeValueMemberL).Value[1] = &types.AttributeValueMemberS{Value: "b"}
		},
		"a step without a name": func(m map[string]types.AttributeValue) {
			delete(m[attrSteps].(*types.AttributeValueMemberL).Value[1].(*types.AttributeValueMemberM).Value, attrStepName)
		},
		"a result not binary": func(m map[string]types.AttributeValue) {
			m[attrSteps].(*types.AttributeValueMemberL).Value[1].(*types.AttributeValueMemberM).Value[attrStepResult] = &types.AttributeValueMemberS{Value: "r"}
		},
	} {
		m := base()
		m[attrSteps] = &types.AttributeValueMemberL{Value: []types.AttributeValue{
			stepValue(store.Step{Name: "a"}).(*types.AttributeValueMemberL).Value[0],
			stepValue(store.Step{Name: "b"}).(*types.AttributeValueMemberL).Value[0],
		}}
		m[attrStepCount] = num(2)
		change(m)
		if _, err := decode("get", "k", m); idemkit.CodeOf(err) != idemkit.CodeInternal {
			t.Errorf("%s: %v; want Internal", what, err)
		}
	}
}
