package nn

import "errors"

var errEmptyBN = errors.New("nn: batch norm over an empty batch on every rank")
