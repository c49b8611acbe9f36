module github.com/ncclwatch/ncclwatch

go 1.26
