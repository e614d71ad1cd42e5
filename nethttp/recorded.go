package nethttp

import "net/http"

// DecodeResponse decodes the response the middleware (and the gin and echo
// adapters, which share its core) records for a request, as an operator's
// tool reads it from the record (middleware.Guard.Inspect with
// withResponse, the "response" of [NewAdmin]'s record, idemkit inspect
// -raw): the status, the headers a replay sends and the body. Bytes the
// middleware did not record (another adapter's, a sealed envelope) are an
// error. body aliases b.
func DecodeResponse(b []byte) (status int, header http.Header, body []byte, err error) {
	header = make(http.Header)
	status, body, err = decodeInto(b, func(name string, values []string) { header[name] = values })
	if err != nil {
		return 0, nil, nil, err
	}
	return status, header, body, nil
}
