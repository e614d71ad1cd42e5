package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// dynamoCall sends one DynamoDB API call (target, JSON body) to s and
// returns the answer's status and body. dynalite checks that a request is
// signed, not the signature.
func dynamoCall(t *testing.T, s *DynamoServer, target, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+target)
	req.Header.Set("X-Amz-Date", "20260101T000000Z")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNewDynamoKeepsTablesAcrossRestart: a dedicated dynalite answers the
// API, and a table created before a kill (Restart) is there after it, so
// fault tests see a crashed node's data come back.
func TestNewDynamoKeepsTablesAcrossRestart(t *testing.T) {
	s := NewDynamo(t)
	const table = `{"TableName":"tab","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],` +
		`"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"BillingMode":"PAY_PER_REQUEST"}`
	if code, body := dynamoCall(t, s, "CreateTable", table); code != http.StatusOK {
		t.Fatalf("CreateTable: %d %s", code, body)
	}
	s.Restart(t)
	code, body := dynamoCall(t, s, "ListTables", "{}")
	if code != http.StatusOK || !strings.Contains(body, `"tab"`) {
		t.Fatalf("ListTables after a restart: %d %s; want the table tab", code, body)
	}
}
