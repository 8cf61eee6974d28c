package nn

import "errors"

var errEmptyBN = errors.New("models: batch norm over an empty batch on every rank")
