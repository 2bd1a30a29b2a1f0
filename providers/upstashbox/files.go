package upstashbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"strconv"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// placeScript moves an uploaded file ($1) to its place ($2), creating the
// parent directories, and gives it mode $3 (octal).
const placeScript = `mkdir -p -- "$(dirname -- "$2")" && chmod "$3" -- "$1" && mv -f -- "$1" "$2" || { rm -f -- "$1"; exit 1; }`

// WriteFile writes req.Body to req.Path in the lease's box: it uploads the
// body to a fresh temporary path (the upload endpoint takes no mode and
// may not create directories), then moves it into place with its mode.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	err := checkPath(req.Path)
	if err == nil && req.Path == "/" {
		err = errors.New(`path "/" is not a file`)
	}
	if err != nil {
		return fmt.Errorf("upstash-box: write file on %s: %w", req.LeaseID, err)
	}
	bx, err := b.live(ctx, req.LeaseID)
	if err != nil {
		return err
	}
	body := req.Body
	if req.Size >= 0 {
		body = &exactly{r: io.LimitReader(req.Body, req.Size+1), want: req.Size}
	}
	if err := b.writeFile(ctx, bx.ID, req.Path, req.Mode, body); err != nil {
		return fmt.Errorf("upstash-box: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return nil
}

// writeFile uploads body to a temporary path of box and moves it to p
// with mode.
func (b *Backend) writeFile(ctx context.Context, box, p string, mode fs.FileMode, body io.Reader) error {
	tmp := "/tmp/crabbox-upload-" + randomHex()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	packed := make(chan error, 1)
	go func() {
		err := writeForm(mw, tmp, body)
		pw.CloseWithError(err)
		packed <- err
	}()
	err := b.api.upload(ctx, box, tmp, pr, mw.FormDataContentType())
	pr.CloseWithError(errRequestEnded) // unblocks writeForm if the request stopped reading
	if perr := <-packed; perr != nil && !errors.Is(perr, errRequestEnded) && !errors.Is(perr, io.ErrClosedPipe) {
		err = perr // the body was at fault, not the API
	}
	if err != nil {
		return err
	}
	res, err := b.api.exec(ctx, box, []string{"sh", "-c", placeScript, "crabbox", tmp, p, strconv.FormatUint(uint64(mode.Perm()), 8)})
	if err != nil {
		return fmt.Errorf("move the upload into place: %w", err)
	}
	if *res.ExitCode != 0 {
		return fmt.Errorf("move the upload into place: exit %d: %s", *res.ExitCode, strings.TrimSpace(res.Output+" "+res.Error))
	}
	return nil
}

// errRequestEnded ends a writeForm whose request stopped reading its body.
var errRequestEnded = errors.New("the upload request ended")

// writeForm writes the upload endpoint's form: the destination in
// "paths", the body in "files".
func writeForm(mw *multipart.Writer, dest string, body io.Reader) error {
	if err := mw.WriteField("paths", dest); err != nil {
		return err
	}
	part, err := mw.CreateFormFile("files", dest[strings.LastIndex(dest, "/")+1:])
	if err != nil {
		return err
	}
	if _, err := io.Copy(part, body); err != nil {
		return fmt.Errorf("read the body: %w", err)
	}
	return mw.Close()
}

// exactly reads r, failing unless it has want bytes.
type exactly struct {
	r    io.Reader
	want int64
	n    int64
}

func (e *exactly) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.n += int64(n)
	switch {
	case e.n > e.want:
		return n, fmt.Errorf("the body is longer than the %d bytes announced", e.want)
	case errors.Is(err, io.EOF) && e.n < e.want:
		return n, fmt.Errorf("the body has %d bytes, not the %d announced", e.n, e.want)
	}
	return n, err
}

// ReadFile opens req.Path in the lease's box through the download
// endpoint; a missing file is ErrNotFound.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkPath(req.Path); err != nil {
		return nil, fmt.Errorf("upstash-box: read file on %s: %w", req.LeaseID, err)
	}
	bx, err := b.live(ctx, req.LeaseID)
	if err != nil {
		return nil, err
	}
	rc, err := b.api.download(ctx, bx.ID, req.Path)
	if err != nil {
		return nil, fmt.Errorf("upstash-box: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return rc, nil
}
