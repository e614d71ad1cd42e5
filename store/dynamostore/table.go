package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemkit/idemkit"
)

// tableWait bounds how long CreateTable waits for a table to become
// ACTIVE, besides ctx.
const tableWait = 5 * time.Minute

// CreateTable creates the store's table when it does not exist (the name
// of [WithTable]; the other options are ignored) and returns once it is
// ACTIVE with DynamoDB's TTL enabled on its expireAt attribute. It is
// idempotent: on a table that exists it checks its key schema and its
// lock-id index (Misconfigured, naming what is wrong, when they are not
// the store's) and enables TTL when it is off. The table is on-demand
// (PAY_PER_REQUEST); docs/backends.md has the same definition for
// CloudFormation and Terraform. An endpoint without the TimeToLive API
// (dynalite) gets the table without TTL: nothing is deleted there.
func CreateTable(ctx context.Context, client *dynamodb.Client, opts ...Option) error {
	const op = "create table"
	if client == nil {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "a DynamoDB client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return err
	}
	str := types.ScalarAttributeTypeS
	_, err = client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   &cfg.table,
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrKey), AttributeType: str},
			{AttributeName: aws.String(attrLockID), AttributeType: str},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName:  aws.String(lockIndex),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(attrLockID), KeyType: types.KeyTypeHash}},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return mapError(ctx, op, err)
	}
	wait, cancel := context.WithTimeout(ctx, tableWait)
	defer cancel()
	var desc *types.TableDescription
	for {
		out, err := client.DescribeTable(wait, &dynamodb.DescribeTableInput{TableName: &cfg.table})
		if err != nil {
			return mapError(wait, op, err)
		}
		desc = out.Table
		if desc.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-wait.Done():
			return mapError(wait, op, wait.Err())
		case <-time.After(time.Second):
		}
	}
	if detail := checkSchema(desc); detail != "" {
		return idemkit.NewError(idemkit.CodeMisconfigured, op, "the table "+detail+": drop it and let CreateTable make it, or fix it as docs/backends.md shows", nil)
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &cfg.table})
	if err != nil {
		return mapError(ctx, op, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		if aws.ToString(d.AttributeName) != attrExpireAt {
			return idemkit.NewError(idemkit.CodeMisconfigured, op, "the table's TTL is on another attribute than "+attrExpireAt+": disable it and run CreateTable again", nil)
		}
		return nil
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &cfg.table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrExpireAt), Enabled: aws.Bool(true)},
	})
	var api smithy.APIError
	if err != nil && errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException" {
		return nil // an emulator without TTL
	}
	return mapError(ctx, op, err)
}

// checkSchema returns what is wrong with the table d for the store, or "".
func checkSchema(d *types.TableDescription) string {
	if len(d.KeySchema) != 1 || aws.ToString(d.KeySchema[0].AttributeName) != attrKey {
		return "does not have the single partition key " + attrKey
	}
	for _, a := range d.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == attrKey && a.AttributeType != types.ScalarAttributeTypeS {
			return "has a partition key " + attrKey + " that is not a string"
		}
	}
	for _, g := range d.GlobalSecondaryIndexes {
		if aws.ToString(g.IndexName) == lockIndex {
			if len(g.KeySchema) != 1 || aws.ToString(g.KeySchema[0].AttributeName) != attrLockID {
				return "has an index " + lockIndex + " whose key is not " + attrLockID
			}
			return ""
		}
	}
	return "lacks the global secondary index " + lockIndex + " on " + attrLockID
}
