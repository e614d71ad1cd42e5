module github.com/idemkit/idemkit/connectinterceptor

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/idemkit/idemkit v0.1.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/protobuf v1.36.12
)

require golang.org/x/text v0.44.0 // indirect
