package dynamostore_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestSealedRecordsOnDynamo runs the sealed-record scenario on one table,
// reading the record's item back: every attribute as DynamoDB holds it,
// and the whole item printed.
func TestSealedRecordsOnDynamo(t *testing.T) {
	t.Parallel()
	url := testenv.Dynamo(t).URL
	admin, _ := newClient(t, url)
	opt, table := newTable(t, admin)
	guardtest.Sealed(t,
		func(t *testing.T) store.Store {
			client, _ := newClient(t, url)
			return newStore(t, client, opt)
		},
		func(t *testing.T, recordKey string) []guardtest.Field {
			item := rawItem(t, admin, table, recordKey)
			var fields []guardtest.Field
			for name, v := range item {
				var b []byte
				switch v := v.(type) {
				case *types.AttributeValueMemberS:
					b = []byte(v.Value)
				case *types.AttributeValueMemberN:
					b = []byte(v.Value)
				case *types.AttributeValueMemberB:
					b = v.Value
				}
				if name == "rs" {
					name = "response"
				}
				fields = append(fields, guardtest.Field{Name: name, Value: b})
			}
			return append(fields, guardtest.Field{Name: "item", Value: fmt.Append(nil, item)})
		})
}

// TestSealedConformance runs the store suite on a sealed store: sealing
// keeps the contract and adds no round trip. The response limit is the
// store's, less the envelope. It runs on the real clock: an envelope
// records its outcome's expiry, which the sealed store judges by it.
func TestSealedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		client, c := newClient(t, testenv.Dynamo(t).URL)
		opt, table := newTable(t, client)
		s := newStore(t, client, opt, dynamostore.WithMaxResponseBytes(suiteMaxResponse), dynamostore.WithMaxClockSkew(0))
		current, retired := guardtest.SealKeys()
		ss, err := store.Seal(s, retired, current)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: ss, Margin: margin, Break: c.Break,
			MaxResponseBytes: suiteMaxResponse - guardtest.SealOverhead(retired),
			RoundTrips:       c.RoundTrips,
			MaxRoundTrips:    storetest.RoundTripLimits{Busy: 2, Replay: 2},
			Keys:             immortal(client, table),
		}
	})
}

// TestSealedRecordsTamperedOnDynamo changes sealed records' attributes
// straight in their items: no change makes a retry run the work again or
// replay anything but the authentic outcome.
func TestSealedRecordsTamperedOnDynamo(t *testing.T) {
	t.Parallel()
	url := testenv.Dynamo(t).URL
	admin, _ := newClient(t, url)
	opt, table := newTable(t, admin)
	guardtest.SealedTampering(t, func(t *testing.T) store.Store {
		client, _ := newClient(t, url)
		return newStore(t, client, opt)
	}, func(t *testing.T, recordKey string, change guardtest.Tampering) {
		item := rawItem(t, admin, table, recordKey)
		if len(item) == 0 {
			t.Fatal("no item to change")
		}
		if change.Tombstone {
			item["st"] = &types.AttributeValueMemberN{Value: "0"}
		} else if change.State != 0 {
			item["st"] = &types.AttributeValueMemberN{Value: strconv.Itoa(int(change.State))}
		}
		if change.Expired {
			item["ex"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)}
		}
		if change.Fence != 0 {
			fe, err := strconv.ParseInt(item["fe"].(*types.AttributeValueMemberN).Value, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			item["fe"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(fe+change.Fence, 10)}
		}
		if change.Fingerprint != "" {
			item["fp"] = &types.AttributeValueMemberS{Value: change.Fingerprint}
		}
		if _, err := admin.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatalf("changing the record's item: %v", err)
		}
	})
}
