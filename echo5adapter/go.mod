module github.com/idemkit/idemkit/echo5adapter

go 1.26.0

require (
	github.com/idemkit/idemkit v0.1.0
	github.com/labstack/echo/v5 v5.4.6
)

require (
	golang.org/x/text v0.44.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
