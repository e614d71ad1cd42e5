package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// RecordStep implements [store.Stepper]: one UpdateItem that appends the
// step to the item's sp and counts it in sc, conditioned on the item
// carrying the claim (key, fence), run out or not (as Complete), and index
// steps (no sc for the first). It raises expireAt to keep the item as a
// claim whose lease ran keep from now would be kept (so at least keep,
// plus [store.ClaimRetention] and the skew margin); when the item is kept
// longer already (a lease that runs past the keep, a longer keep of an
// earlier step) that write is refused and a second one appends the step
// alone ([Store.Extend] does the same), since DynamoDB has no max to
// write in one. The step's write replaces the claim's write id (wid),
// which a claim needs only until it is made: a write whose answer was
// lost, retried by the SDK and refused by the step it recorded, reports
// it recorded.
func (s *Store) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	const op = "record-step"
	if err := engine.Ready(ctx, op, engine.ValidateStep(key, fence, index, step, keep)); err != nil {
		return false, err
	}
	now, wid := s.now(), newWriteID()
	values := map[string]types.AttributeValue{
		":fence": num(int64(fence)), ":claimed": num(int64(store.StateClaimed)),
		":step": stepValue(step), ":count": num(int64(index) + 1), ":wid": &types.AttributeValueMemberS{Value: wid},
	}
	// The first step makes the list; a later one appends to it. The
	// caller's index picks the form, so either condition is a flat AND.
	set, cond := "SET sp = :step, sc = :count, wid = :wid", "fe = :fence AND st = :claimed AND attribute_not_exists(sc)"
	if index > 0 {
		set, cond = "SET sp = list_append(sp, :step), sc = :count, wid = :wid", "fe = :fence AND st = :claimed AND sc = :index"
		values[":index"] = num(int64(index))
	}
	return s.raise(ctx, op, key, fence, &dynamodb.UpdateItemInput{
		TableName:                 &s.cfg.table,
		Key:                       s.pk(key),
		UpdateExpression:          aws.String(set),
		ExpressionAttributeValues: values,
	}, cond, expireAt(sat(now, keep.Milliseconds()), fence, true, s.cfg.step, s.cfg.skew), wid)
}
