package dynamostore

import (
	"context"
	"encoding/base64"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// List implements [store.Lister]: one strongly consistent Scan per page,
// which reads up to limit items of the table after the item the cursor
// names (its partition key in unpadded base64url), in DynamoDB's order,
// keeping the live records under prefix. Under a prefix an item's
// partition key holds verbatim, DynamoDB filters the items (and the
// encoded keys, which it cannot judge); a listing still reads the whole
// table over its pages, each one's capacity counted on what it read.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	var start map[string]types.AttributeValue
	var cursorErr error
	if after != "" {
		pk, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || len(pk) == 0 {
			cursorErr = idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
		}
		start = map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: string(pk)}}
	}
	if err := engine.Ready(ctx, op, engine.ValidateList(limit), cursorErr); err != nil {
		return nil, "", err
	}
	in := &dynamodb.ScanInput{
		TableName: &s.cfg.table, ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(limit)), ExclusiveStartKey: start,
		FilterExpression:          aws.String("st > :released"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":released": num(int64(released))},
	}
	if prefix != "" && encodeKey(prefix) == prefix {
		// A key under prefix is held verbatim, or encoded (a "#" ahead).
		in.FilterExpression = aws.String("st > :released AND (begins_with(pk, :prefix) OR begins_with(pk, :encoded))")
		in.ExpressionAttributeValues[":prefix"] = &types.AttributeValueMemberS{Value: prefix}
		in.ExpressionAttributeValues[":encoded"] = &types.AttributeValueMemberS{Value: encodedPrefix}
	}
	out, err := s.client.Scan(ctx, in)
	if err != nil {
		return nil, "", mapError(ctx, op, err)
	}
	now, skew := s.now(), s.cfg.skew.Milliseconds()
	var recs []store.Record
	for _, m := range out.Items {
		pk, ok := m[attrKey].(*types.AttributeValueMemberS)
		if !ok {
			return nil, "", malformed(op, "an item without a partition key")
		}
		key, ok := decodeKey(pk.Value)
		if !ok {
			return nil, "", malformed(op, "the partition key is not a record key's encoding")
		}
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		it, err := decode(op, key, m)
		if err != nil {
			return nil, "", err
		}
		if it.live(now, skew) {
			recs = append(recs, it.record())
		}
	}
	next := ""
	if pk, ok := out.LastEvaluatedKey[attrKey].(*types.AttributeValueMemberS); ok {
		next = base64.RawURLEncoding.EncodeToString([]byte(pk.Value))
	}
	return recs, next, nil
}
