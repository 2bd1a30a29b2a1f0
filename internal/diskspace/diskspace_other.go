//go:build !linux && !darwin && !freebsd && !windows

package diskspace

import "errors"

func free(string) (Space, error) { return Space{}, errors.ErrUnsupported }
